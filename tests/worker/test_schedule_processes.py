"""A schedule ticking every second, fired by three real worker processes on PostgreSQL."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import anyio
import asyncpg

from durable_core import DurableClient, Schedule, WorkflowStatus
from durable_core.definitions.schedules import tick_workflow_id
from durable_postgres import PostgresStore
from tests.worker import scheduled_app
from tests.worker.conftest import Workers, eventually

NAME = "every-second"


async def test_three_workers_start_one_workflow_per_tick_until_paused(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    procs = [workers.start("--app", "tests.worker.scheduled_app") for _ in range(3)]

    async def all_started() -> bool:
        return all("started: concurrency" in workers.log(proc) for proc in procs)

    await eventually(all_started, timeout=120, what="three workers started")
    client = DurableClient(pg)
    added_at = datetime.now(UTC)
    row = await client.add_schedule(
        NAME, scheduled_app.ticked, Schedule("* * * * * *", args=("tick",))
    )

    async def four_ticks() -> bool:
        query = "SELECT count(*) FROM workflows WHERE name = 'scheduled.ticked'"
        return int(await sql.fetchval(query)) >= 4

    await eventually(four_ticks, timeout=120, what="four ticks' workflows")
    await client.pause_schedule(NAME)
    paused_at = datetime.now(UTC)

    started = await sql.fetch(
        "SELECT id, headers, created_at FROM workflows WHERE name = 'scheduled.ticked'"
    )
    ids = {r["id"] for r in started}
    by_id = {
        r["id"]: datetime.fromisoformat(json.loads(r["headers"])["durable-schedule-tick"])
        for r in started
    }
    ticks = sorted(by_id.values())
    assert all(tick_workflow_id(NAME, tick) == i for i, tick in by_id.items())
    assert len(ticks) >= 4
    assert ticks[0] == row.next_tick and ticks[0] > added_at
    assert ticks == [ticks[0] + timedelta(seconds=n) for n in range(len(ticks))], (
        "one workflow per tick, every tick from the first to the pause"
    )
    assert ticks[-1] <= paused_at
    for r in started:
        late = r["created_at"] - by_id[r["id"]]
        assert late >= timedelta(0), f"started {late} before its tick"

    await anyio.sleep(2.5)  # two more seconds of ticks: the paused schedule starts nothing
    after = await sql.fetchval("SELECT count(*) FROM workflows WHERE name = 'scheduled.ticked'")
    assert after == len(ids), "nothing started after the pause"
    for workflow_id in ids:
        assert await client.handle(workflow_id).wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    tick_runs = await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = 'tick'")
    assert tick_runs == len(ids)

    # Each tick was fired by one scheduler, whichever worker's it was.
    fired = [
        m.group(1)
        for proc in procs
        for m in re.finditer(
            r"schedule every-second: tick \S+ started workflow (\S+)", workers.log(proc)
        )
    ]
    assert sorted(fired) == sorted(ids), "each tick fired once across the three workers"
    schedule = await client.get_schedule(NAME)
    assert schedule.paused and schedule.last_tick == ticks[-1]


async def test_a_schedule_keeps_one_workflow_per_tick_across_a_sigkilled_worker(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    """A worker SIGKILLed while ticks are firing loses none and doubles none: firing a tick
    is one transaction (the next tick and the workflow), so the survivor fires every tick.
    A tick's workflow the kill interrupts is the survivor's once its lease expires; its
    budget of two attempts lets it finish (a budget of one would fail it, by design)."""
    procs = [
        workers.start("--app", "tests.worker.scheduled_app", WORKFLOW_LOCK_TIMEOUT_SECS=5)
        for _ in range(2)
    ]

    async def all_started() -> bool:
        return all("started: concurrency" in workers.log(proc) for proc in procs)

    await eventually(all_started, timeout=120, what="two workers started")
    client = DurableClient(pg)
    every_second = Schedule("* * * * * *", args=("tick",))
    await client.add_schedule("crash-tick", scheduled_app.ticked_twice, every_second)
    await anyio.sleep(2.5)
    procs[0].kill()
    procs[0].wait(timeout=120)
    await anyio.sleep(3.0)
    await client.pause_schedule("crash-tick")
    rows = await sql.fetch(
        "SELECT id, headers FROM workflows WHERE name = 'scheduled.ticked_twice'"
    )
    ticks = sorted(
        datetime.fromisoformat(json.loads(r["headers"])["durable-schedule-tick"]) for r in rows
    )
    assert len(ticks) >= 4, f"{len(ticks)} workflows in 5.5 s of a schedule every second"
    assert ticks == [ticks[0] + timedelta(seconds=n) for n in range(len(ticks))], (
        "one workflow per tick, none lost or doubled around the kill"
    )
    for r in rows:
        assert await client.handle(r["id"]).wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
