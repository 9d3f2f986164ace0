"""Shared pieces: run settings, figures, statistics and database set-up."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from durable_postgres.store import normalize_url

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Settings:
    """What the whole run shares: the database URL and whether sizes are tiny."""

    url: str
    smoke: bool

    @property
    def dsn(self) -> str:
        """The URL as asyncpg takes it (framework-only query options removed)."""
        return plain_dsn(self.url)

    def pick(self, full: int, smoke: int) -> int:
        """``smoke`` in a smoke run, else ``full``."""
        return smoke if self.smoke else full


def plain_dsn(url: str) -> str:
    """An asyncpg DSN for ``url``, without the framework's own ``durable_*`` query options."""
    dsn, _ = normalize_url(url)
    base, _, query = dsn.partition("?")
    kept = [part for part in query.split("&") if part and not part.startswith("durable_")]
    return base + ("?" + "&".join(kept) if kept else "")


@dataclass
class Figure:
    """One measured figure with the floor measured beside it in the same run.

    ``ratio`` is always ``value / floor``; ``better`` says which way is good.
    """

    name: str
    unit: str
    value: float
    floor: float | None = None
    better: str = "higher"
    trials: list[float] = field(default_factory=list)
    floor_trials: list[float] = field(default_factory=list)
    target: str | None = None
    met: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.floor is None or self.floor == 0 or math.isnan(self.floor):
            return None
        return self.value / self.floor

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        return data


@dataclass
class ScenarioResult:
    """What one scenario measured: figures for the table, details for the JSON."""

    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation, or NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# -- database ------------------------------------------------------------------------------


async def ensure_database(url: str) -> None:
    """Create the benchmark database if it does not exist."""
    dsn = plain_dsn(url)
    match = re.match(r"^(postgresql://[^/]*/)([^/?]+)(\?.*)?$", dsn)
    if match is None:
        raise SystemExit(f"bench: the URL {url!r} names no database")
    name = match.group(2)
    try:
        conn = await asyncpg.connect(dsn, timeout=10)
    except asyncpg.InvalidCatalogNameError:
        admin = match.group(1) + "postgres" + (match.group(3) or "")
        conn = await asyncpg.connect(admin, timeout=10)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        except asyncpg.DuplicateDatabaseError:
            pass
        finally:
            await conn.close()
        return
    await conn.close()


async def prepare_schema(url: str) -> None:
    """Apply the framework's schema to the benchmark database."""
    store = PostgresStore(url)
    await store.open()
    try:
        await store.apply_schema()
    finally:
        await store.close()


async def reset(conn: asyncpg.Connection) -> None:
    """Empty the durable tables (``CASCADE``: and any other table referencing workflows)."""
    await conn.execute(f"TRUNCATE {WORKFLOW_TABLES} CASCADE")


async def server_facts(conn: asyncpg.Connection) -> dict[str, str]:
    """PostgreSQL version and the settings that move the figures."""
    facts = {"version": await conn.fetchval("SELECT version()")}
    for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections"):
        facts[name] = await conn.fetchval(f"SHOW {name}")
    return facts


DEV_PLUGINS = "example,example_observer"
"""The test suite's example plugins (installed by ``make install``, not by a user's
``pip install``): blocked in the bench's workers (``DURABLE_BLOCK_PLUGINS``), so that a
figure is what a user's worker spends."""
