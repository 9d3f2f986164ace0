"""The workflow :mod:`bench.recovery` holds in the worker it kills (`--app bench.recovery_app`)."""

from __future__ import annotations

import os

import anyio
import asyncpg

from bench.common import plain_dsn
from durable_core import WorkflowContext, workflow, workflow_step

MARKS_DDL = """
CREATE TABLE IF NOT EXISTS recovery_marks (
    workflow_id text NOT NULL,
    attempt int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
_pool: asyncpg.Pool | None = None


async def bootstrap() -> None:
    """Open the worker's pool for :func:`hold`'s marks (``--bootstrap``)."""
    global _pool
    url = plain_dsn(os.environ["DURABLE_DATABASE_URL"])
    _pool = await asyncpg.create_pool(url, min_size=1, max_size=2)


@workflow_step
async def hold(seconds: float) -> float:
    """Mark that it began (when, on the server's clock), then, on the first attempt only,
    sleep ``seconds``."""
    ctx = WorkflowContext.current()
    assert ctx is not None and _pool is not None
    await _pool.execute(
        "INSERT INTO recovery_marks (workflow_id, attempt) VALUES ($1, $2)",
        ctx.workflow_id,
        ctx.attempt,
    )
    if ctx.attempt == 1:
        await anyio.sleep(seconds)
    return seconds


@workflow
async def held(seconds: float) -> float:
    """One step, held by the worker that is killed."""
    return await hold(seconds)
