"""A buffered tick survives a SIGKILL of the worker: after a restart it starts once,
when the run before it ends (PostgreSQL, real worker processes)."""

from __future__ import annotations

import signal

import asyncpg

from durable_core import DurableClient, Overlap, Schedule, WorkflowStatus
from durable_core.definitions.schedules import tick_workflow_id
from durable_postgres import PostgresStore
from tests.worker import overlap_app
from tests.worker.conftest import Workers, eventually


async def test_a_buffered_tick_starts_once_after_the_worker_is_killed(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    # Once a year: no tick comes during the test; triggers stand for the ticks.
    spec = Schedule("0 0 1 1 *", overlap=Overlap.BUFFER_ONE)
    await client.add_schedule("held", overlap_app.held, spec)
    first = await client.trigger_schedule("held")
    assert first is not None
    assert await client.trigger_schedule("held") is None
    buffered = (await client.get_schedule("held")).buffered_tick
    assert buffered is not None
    second = client.handle(tick_workflow_id("held", buffered))

    app = ("--app", "tests.worker.overlap_app")
    proc = workers.start(*app)

    async def first_waits() -> bool:
        return (await first.status()) is WorkflowStatus.WAITING

    await eventually(first_waits, timeout=60, what="the first run waiting for go")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)
    assert await pg.get_workflow(second.id) is None, "buffered while the first run waits"

    await client.send(first.id, "go", topic="go")
    workers.start(*app)
    assert await first.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED

    async def second_waits() -> bool:
        found = await pg.get_workflow(second.id)
        return found is not None and found.status is WorkflowStatus.WAITING

    await eventually(second_waits, timeout=60, what="the buffered run started")
    await client.send(second.id, "go", topic="go")
    assert await second.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert await second.output() == "go ran"
    found = await client.get_schedule("held")
    assert (found.latest_id, found.buffered_tick) == (second.id, None)
    runs = await sql.fetch("SELECT workflow_id FROM step_runs WHERE step = 'held'")
    assert sorted(r["workflow_id"] for r in runs) == sorted([first.id, second.id]), "once each"
    started = await client.list_workflows(name=overlap_app.held.name, limit=10)
    assert sorted(r.id for r in started) == sorted([first.id, second.id])
