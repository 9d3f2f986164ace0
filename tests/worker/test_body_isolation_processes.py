"""Nothing a workflow body does ends the worker or touches another workflow, and a lost
lease stops a body that catches every ``Exception``, on real worker processes."""

from __future__ import annotations

import signal

import asyncpg
import pytest

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually

pytestmark = pytest.mark.anyio  # marked at collection too, so parametrize keeps its ids


async def test_a_wait_inside_a_task_group_suspends_and_the_worker_lives_on(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    """It used to raise a BaseExceptionGroup out of the worker (exit 1, for every worker
    that claimed the workflow after)."""
    client = DurableClient(pg)
    waiter = await client.start_workflow(app.waits_in_a_task_group, 0.5)
    proc = workers.start(WORKFLOW_CONCURRENCY=2)

    async def waiting_on_the_message() -> bool:
        record = await waiter.info()
        return record.status is WorkflowStatus.WAITING and record.waiting_for == "message:go"

    await eventually(waiting_on_the_message, timeout=120, what="the nap to end and go to wait")
    others = await client.start_workflows(app.three_steps, [(n,) for n in range(10)])
    for handle in others:
        assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    await client.send(waiter.id, "go", topic="go")
    assert await waiter.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    assert await waiter.output() == "rested, got go"
    assert proc.poll() is None, "the worker is still running"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, workers.log(proc)


@pytest.mark.parametrize("kind", ["system_exit", "keyboard_interrupt", "group", "cancelled"])
async def test_a_body_raising_a_base_exception_fails_alone(
    kind: str, pg: PostgresStore, workers: Workers
) -> None:
    client = DurableClient(pg)
    bad = await client.start_workflow(app.raises_base_exception, kind)
    proc = workers.start(WORKFLOW_CONCURRENCY=4)
    others = await client.start_workflows(app.three_steps, [(n,) for n in range(10)])
    assert await bad.wait_with_timeout(30) is WorkflowStatus.FAILED
    error = await bad.error()
    assert error is not None and error["type"] == "durable_core.errors.BodyRaisedError"
    assert "raises_base_exception" in error["message"]
    for handle in others:
        assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    assert proc.poll() is None, "the worker is still running"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, workers.log(proc)


async def test_a_cancel_heard_only_through_a_refused_write_stops_a_body_catching_everything(
    postgres_url: str, pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    """Without LISTEN the worker learns of the cancel when the body's next write is
    refused: the body is cancelled then, as anyio cancels, though it catches `Exception`."""
    client = DurableClient(pg)
    handle = await client.start_workflow(app.catches_everything, 200)
    workers.url = f"{postgres_url}?durable_listen=off"
    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=30)

    async def ticking() -> bool:
        return bool(
            await sql.fetchval("SELECT count(*) >= 3 FROM step_runs WHERE step LIKE 'tick%'")
        )

    await eventually(ticking, timeout=120, what="a few ticks")
    await client.cancel(handle.id)
    cancelled_at = await sql.fetchval("SELECT count(*) FROM step_runs WHERE step LIKE 'tick%'")

    async def attempt_recorded() -> bool:
        return bool(
            await sql.fetchval(
                "SELECT count(*) FROM workflow_attempts WHERE workflow_id = $1", handle.id
            )
        )

    await eventually(attempt_recorded, timeout=120, what="the attempt's end to be recorded")
    assert await handle.status() is WorkflowStatus.CANCELLED
    outcomes = await sql.fetch(
        "SELECT outcome FROM workflow_attempts WHERE workflow_id = $1", handle.id
    )
    assert [r["outcome"] for r in outcomes] == ["cancelled"]
    ticks = await sql.fetchval("SELECT count(*) FROM step_runs WHERE step LIKE 'tick%'")
    assert ticks <= cancelled_at + 2, f"the body went on: {ticks - cancelled_at} more ticks"
    assert not await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = 'swallowed'") > 1
