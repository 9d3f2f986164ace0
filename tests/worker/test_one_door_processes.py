"""Every effect of a body goes through its attempt, after the writes it depends on.

With group commit a step's end is written behind. A body that starts a child, sends a
message, publishes an event or changes a schedule with a value a step returned must
not let that effect reach the database before the step's end has committed: a crash
in between would run the step again, and the effect would carry a value the workflow's
history never kept. Each test holds the workflow's row locked, so the flush carrying
the step's end waits, SIGKILLs the worker in that window, and checks that what the
effect left agrees with the history the next worker completes.
"""

from __future__ import annotations

import json
import signal

import anyio
import asyncpg
import pytest

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually, plain

LEASE = 2

pytestmark = pytest.mark.anyio  # marked at collection too, so parametrize keeps its ids


async def _flush_waits_on_lock(sql: asyncpg.Connection) -> bool:
    return bool(
        await sql.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database() AND query LIKE '%unnest%'"
        )
    )


@pytest.mark.parametrize("effect", sorted(app.ONE_DOOR))
async def test_an_effect_waits_for_the_step_it_depends_on_across_a_sigkill(
    effect: str, pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    await sql.execute(app.RECEIPTS_DDL)
    target = await client.start_workflow(app.receive_and_keep, "picked")
    flow = app.ONE_DOOR[effect]
    handle = await (
        client.start_workflow(flow, target.id) if effect == "send" else client.start_workflow(flow)
    )
    victim = workers.start(
        WORKFLOW_LOCK_TIMEOUT_SECS=LEASE,
        WORKFLOW_STEP_ROW_AFTER_MS=60000,
        TEST_PICK_PAUSE=1.5,
    )

    async def picking() -> bool:
        return bool(await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = 'pick'"))

    await eventually(picking, timeout=120, what="the pick step to run")
    blocker = await asyncpg.connect(plain(workers.url))
    transaction = blocker.transaction()
    await transaction.start()
    try:
        await blocker.execute("SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE", handle.id)

        async def flush_blocked() -> bool:
            return await _flush_waits_on_lock(sql)

        await eventually(flush_blocked, timeout=120, what="the flush of pick's end to wait")
        # The window: pick has returned, its end has not committed. Nothing it fed may go
        # out, however long the flush waits (watched for a second: before the fix, the
        # effect went out within milliseconds of pick's return).
        for _ in range(20):
            out = await sql.fetchrow(
                "SELECT (SELECT count(*) FROM workflows WHERE parent_id = $1) AS children,"
                " (SELECT count(*) FROM workflow_messages WHERE workflow_id = $2) AS messages,"
                " (SELECT count(*) FROM workflow_schedules WHERE name LIKE 'picked-%')"
                " AS schedules",
                handle.id,
                target.id,
            )
            assert tuple(out) == (0, 0, 0), f"an effect went out before its step: {dict(out)}"
            await anyio.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=120)
        # The dead worker's flush never commits (as when the crash takes its connection down).
        await sql.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            " AND query LIKE '%unnest%'"
        )
    finally:
        await transaction.rollback()
        await blocker.close()

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED, await handle.error()
    picked = await sql.fetchval(
        "SELECT output FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2",
        handle.id,
        "tests.worker.app.pick",
    )
    value = json.loads(picked)
    assert value.startswith("2-"), "pick ran again: its first end never committed"
    # (Before the fix, the child was started with pick's first value and the parent failed
    # with WorkflowConflictError; the message carried a value the history does not hold.)
    assert await handle.output() == value
    if effect == "child":
        rows = await sql.fetch("SELECT input FROM workflows WHERE parent_id = $1", handle.id)
        assert [json.loads(r["input"])["args"] for r in rows] == [[value]]
    elif effect == "send":
        assert await target.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
        assert await target.output() == value, "the message carries the value the history kept"
        sent = await sql.fetchval(
            "SELECT count(*) FROM workflow_messages WHERE workflow_id = $1", target.id
        )
        assert sent == 1
    elif effect == "event":
        assert await handle.get_event("picked") == value
    else:
        names = await sql.fetch("SELECT name FROM workflow_schedules WHERE name LIKE 'picked-%'")
        assert [r["name"] for r in names] == [f"picked-{value}"]
    if effect != "send":
        await target.cancel()
