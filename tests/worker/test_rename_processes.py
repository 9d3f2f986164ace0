"""A class renamed between two deploys with a workflow in flight, on the real PostgreSQL:
version 1's worker is SIGKILLed mid-workflow with a ``Receipt`` cached; version 2 renames
the class ``Invoice`` with an alias to the old name, and its worker completes the workflow."""

from __future__ import annotations

import signal

import asyncpg

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import rename_v1
from tests.worker.conftest import Workers, eventually


async def test_a_workflow_in_flight_completes_after_its_step_value_class_is_renamed(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    v1_worker = workers.start(
        "--bootstrap",
        "tests.worker.app:bootstrap",
        app="tests.worker.rename_v1",
        WORKFLOW_LOCK_TIMEOUT_SECS=2,
        WORKFLOW_CONCURRENCY=1,
    )
    handle = await client.start_workflow(rename_v1.checkout, "A-7", 1250)

    async def waiting() -> bool:
        return bool(await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = 'wait'"))

    await eventually(waiting, timeout=120, what="version 1 to enter its hanging step")
    v1_worker.send_signal(signal.SIGKILL)
    v1_worker.wait(timeout=120)
    row = await sql.fetchrow("SELECT status, attempts FROM workflows WHERE id = $1", handle.id)
    assert (row["status"], row["attempts"]) == ("running", 1)
    cached = {
        r["step_name"]: (r["input"], r["output"])
        for r in await sql.fetch(
            "SELECT step_name, input, output FROM workflow_steps WHERE workflow_id = $1",
            handle.id,
        )
    }
    old_name = '"type":"tests.worker.rename_v1:Receipt"'
    assert old_name in cached["rename.charge"][1], "the cached output names the old class"
    assert old_name in cached["rename.label"][0], "so does the recorded input of the next step"

    v2_worker = workers.start(
        "--bootstrap",
        "tests.worker.app:bootstrap",
        app="tests.worker.rename_v2",
        WORKFLOW_LOCK_TIMEOUT_SECS=2,
        WORKFLOW_CONCURRENCY=1,
    )
    status = await handle.wait_with_timeout(60)
    assert status is WorkflowStatus.SUCCEEDED, workers.log(v2_worker)
    assert await handle.output() == "Invoice A-7 1250: label for A-7"
    record = await handle.info()
    assert record.attempts == 2
    runs = await sql.fetch(
        "SELECT step, attempt FROM step_runs WHERE workflow_id = $1 ORDER BY at", handle.id
    )
    assert [(r["step"], r["attempt"]) for r in runs] == [
        ("charge", 1),
        ("label", 1),
        ("wait", 1),
        ("wait", 2),
    ], "the steps cached before the kill were replayed with the renamed class, not run again"
