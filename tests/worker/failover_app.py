"""Workflows the failover test runs: three steps, each recorded in ``step_runs``.

A step's own write to the database (the side table) waits out the switch from the
old primary to the new one, as an application's step would with a retry loop of its own.
"""

from __future__ import annotations

import os

import anyio
import asyncpg

from durable_core import WorkflowContext, workflow, workflow_step
from tests.worker.app import SIDE_TABLE_APP

_pool: asyncpg.Pool | None = None

_SWITCHING = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.InternalClientError,
)


async def bootstrap() -> None:
    """Open the side-table pool on the read-write one of the URL's hosts."""
    global _pool
    url = os.environ["DURABLE_DATABASE_URL"].split("?", 1)[0]
    _pool = await asyncpg.create_pool(
        url,
        min_size=1,
        max_size=4,
        target_session_attrs="read-write",
        server_settings={"application_name": SIDE_TABLE_APP},
    )


async def record(step: str) -> None:
    ctx = WorkflowContext.current()
    assert ctx is not None and _pool is not None
    while True:
        try:
            await _pool.execute(
                "INSERT INTO step_runs (workflow_id, step, attempt, worker) "
                "VALUES ($1, $2, $3, $4)",
                ctx.workflow_id,
                step,
                ctx.attempt,
                ctx.worker_id,
            )
            return
        except _SWITCHING:
            await anyio.sleep(0.1)


@workflow_step
async def hop(n: int, i: int, pause: float) -> int:
    await record(f"hop{i}")
    await anyio.sleep(pause)
    return n + i


@workflow
async def hops(n: int, pause: float) -> int:
    """Three steps of ``pause`` seconds each: ``3 * n + 3``."""
    total = 0
    for i in range(3):
        total += await hop(n, i, pause)
    return total
