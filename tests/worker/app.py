"""Workflows run by worker processes in the worker tests.

Every step body records that it ran in the ``step_runs`` side table, so the
tests count real executions, not log lines.
"""

from __future__ import annotations

import json
import os

import anyio
import asyncpg

from durable_core import (
    WorkflowContext,
    recv,
    sleep,
    start_workflows,
    workflow,
    workflow_step,
)

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


# -- waiting workflows (tests/worker/test_waiting_processes.py) ---------------------------------

RECEIPTS_DDL = """
CREATE TABLE IF NOT EXISTS receipts (
    workflow_id text NOT NULL,
    value text NOT NULL,
    attempt int NOT NULL,
    worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
"""What a step saw a workflow receive: one row per run of ``keep_receipt``."""


@workflow_step
async def woke() -> None:
    await record("woke")


@workflow
async def sleeper(seconds: float) -> str:
    """A durable sleep, then one step."""
    await sleep(seconds)
    await woke()
    return "rested"


@workflow_step
async def after_sleep(n: int) -> int:
    """The step after a sleep: blocks on attempt 1 (until the worker is killed)."""
    await record("after_sleep")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        await anyio.sleep(3600)
    return n * 10


@workflow
async def sleep_then_block(seconds: float, n: int) -> int:
    await sleep(seconds)
    return await after_sleep(n)


@workflow_step
async def keep_receipt(value: object) -> object:
    """Record in ``receipts`` what the body received."""
    ctx = WorkflowContext.current()
    assert ctx is not None and _pool is not None
    await _pool.execute(
        "INSERT INTO receipts (workflow_id, value, attempt, worker) VALUES ($1, $2, $3, $4)",
        ctx.workflow_id,
        json.dumps(value, sort_keys=True),
        ctx.attempt,
        ctx.worker_id,
    )
    return value


@workflow_step
async def hold(value: object) -> None:
    """Blocks on attempt 1 (until the worker is killed) when the message says ``hold``."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    if isinstance(value, dict) and value.get("hold") and ctx.attempt == 1:
        await record("hold")
        await anyio.sleep(3600)


@workflow
async def receive_and_keep(topic: str, timeout: float | None = None) -> object:
    """Receive one message on ``topic`` (``None`` after ``timeout``) and keep a receipt."""
    value = await recv(topic, timeout=timeout)
    await hold(value)
    return await keep_receipt(value)


@workflow_step
async def double_it(i: int, hang: bool) -> int:
    """A child's step; with ``hang`` it blocks on attempt 1 (until the worker is killed)."""
    await record("child")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if hang and ctx.attempt == 1:
        await record("hanging")
        await anyio.sleep(3600)
    return 2 * i


@workflow
async def child_double(i: int, hang: bool) -> int:
    return await double_it(i, hang)


@workflow
async def fan_out_sum(n: int, hang_child: int = -1) -> int:
    """Start ``n`` children from the body, then sum their outputs."""
    children = await start_workflows(child_double, [(i, i == hang_child) for i in range(n)])
    total = 0
    for child in children:
        total += await child.output()
    return total
