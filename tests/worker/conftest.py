"""Fixtures for tests that run real worker processes against PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from tests.worker.app import SIDE_TABLE_APP, SIDE_TABLE_DDL

ROOT = Path(__file__).resolve().parents[2]


def plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.fixture
async def pg(postgres_url: str) -> AsyncIterator[PostgresStore]:
    """An open PostgresStore on empty tables, with the ``step_runs`` side table."""
    store = PostgresStore(postgres_url)
    await store.open()
    await store.apply_schema()
    conn = await asyncpg.connect(plain(postgres_url))
    try:
        await conn.execute(SIDE_TABLE_DDL)
        await conn.execute(f"TRUNCATE {WORKFLOW_TABLES}, step_runs")
    finally:
        await conn.close()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def sql(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection for asserting on what the database holds."""
    conn = await asyncpg.connect(plain(postgres_url))
    try:
        yield conn
    finally:
        await conn.close()


class Workers:
    """Starts `durable worker` processes and makes sure none outlives the test."""

    def __init__(self, url: str, log_dir: Path) -> None:
        self.url = url
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, *args: str, app: str = "tests.worker.app", **env: str | float
    ) -> subprocess.Popen[bytes]:
        """A ``durable worker`` process running ``app`` (with the side-table bootstrap when it
        is ``tests.worker.app``), with ``args`` added to its command line."""
        environment = {
            **os.environ,
            "DURABLE_DATABASE_URL": self.url,
            "PYTHONPATH": str(ROOT),
            "WORKFLOW_POLL_INTERVAL_MS": "200",
            **{key: str(value) for key, value in env.items()},
        }
        log = open(self.log_dir / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durable_core",
                "worker",
                "--app",
                app,
                *(
                    ["--bootstrap", "tests.worker.app:bootstrap"]
                    if app == "tests.worker.app"
                    else []
                ),
                *args,
            ],
            env=environment,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        index = self.procs.index(proc)
        return (self.log_dir / f"worker-{index}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=120)


@pytest.fixture
def workers(postgres_url: str, pg: PostgresStore, tmp_path: Path) -> Iterator[Workers]:
    manager = Workers(postgres_url, tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    import anyio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await anyio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def side_table_writes_ended(sql: asyncpg.Connection) -> None:
    """Return once no worker process has a session of the side table's pool open in this
    database: after a SIGKILL, every ``step_runs`` insert the dead worker had sent has
    ended (a session ends only once the statement it had read has ended), so what
    ``step_runs`` holds is what ran there."""

    async def ended() -> bool:
        return not await sql.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = $1",
            SIDE_TABLE_APP,
        )

    await eventually(ended, timeout=120, what="the killed worker's step_runs inserts to end")
