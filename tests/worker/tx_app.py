"""The workflow of the transaction step crash test (tests/worker/test_transaction_processes.py).

``tx_flow(n)`` inserts one row into ``tx_rows`` in a transaction step, then runs a plain
step. The application's tables are in ``$TX_APP_DATABASE_URL`` when it is set (an
``AppDatabase``), else in the store's own database. A worker started with
``TX_KILL_OPEN=k`` SIGKILLs itself inside its k-th transaction, after the insert and
before the commit; with ``TX_KILL_COMMITTED=k``, right after its k-th commit (before the
step's row reaches the store, when that is written behind). Either first writes the
workflow's id to ``$TX_KILL_MARK``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from durable_core import (
    AppDatabase,
    AttemptEvent,
    WorkflowContext,
    hookimpl,
    register_observer,
    transaction_step,
    workflow,
    workflow_step,
)

TX_ROWS_DDL = (
    "DROP TABLE IF EXISTS tx_rows",
    "CREATE TABLE tx_rows (workflow_id text NOT NULL, n int NOT NULL)",  # no key: a twice shows
)

_url = os.environ.get("TX_APP_DATABASE_URL")
DATABASE = AppDatabase(_url) if _url else None
KILL_OPEN = int(os.environ.get("TX_KILL_OPEN", "0"))
KILL_COMMITTED = int(os.environ.get("TX_KILL_COMMITTED", "0"))
LINGER = float(os.environ.get("TX_LINGER", "0"))
_counts = {"open": 0, "committed": 0}


def _die(kind: str, limit: int, workflow_id: str) -> None:
    _counts[kind] += 1
    if _counts[kind] == limit:
        Path(os.environ["TX_KILL_MARK"]).write_text(workflow_id)
        os.kill(os.getpid(), signal.SIGKILL)


@transaction_step(database=DATABASE)
async def insert_row(conn: AsyncConnection, n: int) -> int:
    ctx = WorkflowContext.current()
    assert ctx is not None
    await conn.execute(
        sa.text("INSERT INTO tx_rows (workflow_id, n) VALUES (:wf, :n)"),
        {"wf": ctx.workflow_id, "n": n},
    )
    if LINGER:
        await anyio.sleep(LINGER)
    _die("open", KILL_OPEN, ctx.workflow_id)
    return n * 2


@workflow_step
async def after(m: int) -> int:
    return m + 1


@workflow(max_attempts=20)  # a workflow in flight in several killed workers spends one each
async def tx_flow(n: int) -> int:
    return await after(await insert_row(n))


class _KillAfterCommit:
    @hookimpl
    def durable_step_succeeded(self, attempt: AttemptEvent, step_name: str, cached: bool) -> None:
        if step_name == insert_row.name and not cached:
            _die("committed", KILL_COMMITTED, attempt.workflow_id)


if KILL_COMMITTED:
    register_observer(_KillAfterCommit())
