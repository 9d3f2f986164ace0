"""The workflows worker processes run behind PgBouncer (``tests/worker/test_pgbouncer.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from durable_core import (
    AppDatabase,
    WorkflowContext,
    recv,
    sleep,
    transaction_step,
    workflow,
    workflow_step,
)

_app_url = os.environ.get("POOLER_APP_DATABASE_URL")
APP_DATABASE = AppDatabase(_app_url) if _app_url else None
"""Where ``insert_row`` writes: ``$POOLER_APP_DATABASE_URL`` when set, else the store's
database."""
ROWS_DDL = "CREATE TABLE IF NOT EXISTS pooler_rows (workflow_id text PRIMARY KEY, n int NOT NULL)"


@workflow_step
async def add_one(n: int) -> int:
    return n + 1


@workflow_step
async def worker_of() -> str:
    ctx = WorkflowContext.current()
    assert ctx is not None
    return ctx.worker_id


@transaction_step(database=APP_DATABASE)
async def insert_row(conn: AsyncConnection, n: int) -> int:
    """A row written in the same transaction as the step's record."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    await conn.execute(
        sa.text("INSERT INTO pooler_rows (workflow_id, n) VALUES (:wf, :n)"),
        {"wf": ctx.workflow_id, "n": n},
    )
    return n


@workflow(name="pooler.steps")
async def steps(n: int) -> int:
    """Three steps, then a transaction step."""
    return await insert_row(await add_one(await add_one(await add_one(n))))


@workflow(name="pooler.sleeper")
async def sleeper(seconds: float) -> str:
    """A durable sleep, then a step."""
    await sleep(seconds)
    return await worker_of()


@workflow(name="pooler.receiver")
async def receiver(topic: str) -> object:
    """One message on ``topic``, kept by a step."""
    value = await recv(topic)
    await worker_of()
    return value


@workflow(name="pooler.ticked", max_attempts=1)
async def ticked(label: str) -> str:
    """What a schedule starts."""
    return f"{label} by {await worker_of()}"


@workflow_step
async def hang_once() -> str:
    """On its first attempt, says so in ``$POOLER_MARK`` and blocks (until the worker dies)."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        Path(os.environ["POOLER_MARK"]).write_text(ctx.worker_id)
        await anyio.sleep(3600)
    return ctx.worker_id


@workflow(name="pooler.hangs_once")
async def hangs_once() -> str:
    """One step, which blocks on the first attempt."""
    return await hang_once()
