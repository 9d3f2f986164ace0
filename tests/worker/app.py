"""Workflows run by worker processes in the worker tests.

Every step body records that it ran in the ``step_runs`` side table, so the
tests count real executions, not log lines.
"""

from __future__ import annotations

import os

import anyio
import asyncpg

from durable_core import WorkflowContext, workflow, workflow_step

SIDE_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS step_runs (
    workflow_id text NOT NULL,
    step text NOT NULL,
    attempt int NOT NULL,
    worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_pool: asyncpg.Pool | None = None


async def bootstrap() -> None:
    """Open the side-table pool (the worker calls this before claiming)."""
    global _pool
    url = os.environ["DURABLE_DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://")
    _pool = await asyncpg.create_pool(url, min_size=1, max_size=4)


async def record(step: str) -> None:
    ctx = WorkflowContext.current()
    assert ctx is not None and _pool is not None
    await _pool.execute(
        "INSERT INTO step_runs (workflow_id, step, attempt, worker) VALUES ($1, $2, $3, $4)",
        ctx.workflow_id,
        step,
        ctx.attempt,
        ctx.worker_id,
    )


@workflow_step
async def first(n: int) -> int:
    await record("first")
    return n + 1


@workflow_step
async def second(n: int) -> int:
    await record("second")
    return n * 2


@workflow_step
async def third(n: int) -> int:
    await record("third")
    return n - 3


@workflow
async def three_steps(n: int) -> int:
    return await third(await second(await first(n)))


@workflow_step
async def hang_on_first_attempt(n: int) -> int:
    """Runs for ``hang`` seconds on attempt 1, returns at once on later attempts."""
    await record("hang")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        await anyio.sleep(float(os.environ.get("TEST_HANG_SECONDS", "3600")))
    return n


@workflow
async def killed_mid_step(n: int) -> int:
    a = await first(n)
    b = await hang_on_first_attempt(a)
    return await third(b)


@workflow_step
async def slow(seconds: float) -> float:
    await record("slow")
    await anyio.sleep(seconds)
    return seconds


@workflow
async def slow_flow(seconds: float) -> float:
    return await slow(seconds)


@workflow_step
async def mark_started() -> None:
    await record("started")


@workflow
async def instant() -> str:
    await mark_started()
    return "ok"


@workflow_step
async def whoami(seconds: float) -> str:
    """Sleeps, then returns the id of the worker that ran it."""
    await record("whoami")
    await anyio.sleep(seconds)
    ctx = WorkflowContext.current()
    assert ctx is not None
    return ctx.worker_id


@workflow
async def whoami_flow(seconds: float) -> str:
    return await whoami(seconds)
