"""Retention applied by the fleet while it drains (issue 35).

Two real ``durable worker`` processes on PostgreSQL serve queue ``retained``, whose policy
prunes succeeded workflows half a second after they settle. While they drain 400
workflows, their retention prunes those that ended, batch by batch: at the end none of
them is left, nor any row of theirs in any table, while every workflow that waits (for a
message, or for a message after its child settled, the child too) and every workflow whose
own policy keeps it for a day is still there. Once the waiting ones are let go they end
with the child's result (it was kept for its parent) and are pruned in their turn.
"""

from __future__ import annotations

import asyncio

import asyncpg

from durable_core import DurableClient, WorkflowHandle, WorkflowStatus
from durable_core.sql.retention import OWNED
from durable_postgres import PostgresStore
from tests.worker.apps import retained
from tests.worker.conftest import Workers, eventually

APP = "tests.worker.apps.retained"
QUICK = 400


async def rows(sql: asyncpg.Connection, name: str) -> int:
    return int(await sql.fetchval("SELECT count(*) FROM workflows WHERE name = $1", name))


async def orphans(sql: asyncpg.Connection) -> dict[str, int]:
    """Rows of every table that belongs to a workflow whose workflow is gone."""
    found = {}
    for table in OWNED:
        found[table.name] = int(
            await sql.fetchval(
                f"SELECT count(*) FROM {table.name} t "
                "WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = t.workflow_id)"
            )
        )
    return found


async def test_the_fleet_prunes_what_ended_while_it_drains_and_keeps_what_waits(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    waiting = [await client.start_workflow(retained.waits, n) for n in range(3)]
    parents = [await client.start_workflow(retained.parent, n) for n in range(3)]
    kept = [await client.start_workflow(retained.kept, n) for n in range(20)]
    await client.start_workflows(retained.quick, [(n,) for n in range(QUICK)])
    drainers = [workers.start(app=APP, WORKFLOW_CONCURRENCY=16) for _ in range(2)]

    async def quick_gone() -> bool:
        return await rows(sql, "retained.quick") == 0

    await eventually(quick_gone, timeout=300, what="every quick workflow run and pruned")
    assert await orphans(sql) == {table.name: 0 for table in OWNED}
    for handle in waiting:
        assert await handle.status() is WorkflowStatus.WAITING
    for handle in kept:
        assert await handle.status() is WorkflowStatus.SUCCEEDED
    assert await rows(sql, "retained.child") == 3, "a waiting parent's settled child is kept"
    pruned = [w for w in drainers if "retention of queue retained: pruned" in workers.log(w)]
    assert pruned, "a worker says what its retention pruned"
    assert all("Traceback" not in workers.log(w) for w in drainers)

    async def output(handle: WorkflowHandle[int]) -> int:
        # Read as it settles: half a second later it is pruned.
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
        return await handle.output(int)

    outputs = asyncio.gather(*(output(handle) for handle in [*parents, *waiting]))
    for handle in [*waiting, *parents]:
        await client.send(handle.id, "41", topic="go")
    assert await outputs == [1, 2, 3, 41, 42, 43]

    async def the_rest_gone() -> bool:
        left = await sql.fetch("SELECT name, count(*) AS n FROM workflows GROUP BY name")
        return {r["name"]: r["n"] for r in left} == {"retained.kept": 20}

    await eventually(the_rest_gone, timeout=120, what="the released workflows pruned")
    assert await orphans(sql) == {table.name: 0 for table in OWNED}
