"""Schedules through the client and the scheduler, in-process on SQLite and PostgreSQL.

The scheduler runs with an explicit clock, so missed ticks are a matter of
setting the time; the real worker processes are in tests/worker.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import cast

import anyio
import pytest

from durable_core import (
    DurableClient,
    Schedule,
    ScheduleConflictError,
    ScheduleNotFoundError,
    WorkflowContext,
    WorkflowStatus,
    workflow,
)
from durable_core.definitions.queues import Queue, Route
from durable_core.definitions.registry import Registry
from durable_core.definitions.schedules import ScheduleRecord, tick_workflow_id
from durable_core.runtime.config import WorkflowConfig
from durable_core.runtime.scheduler import Scheduler, save_declared
from durable_core.seams.store import Claimer, ScheduleFeed, Store
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    return sqlite_or_postgres


@workflow(name="report")
async def report(kind: str, copies: int = 1) -> str:
    return f"{copies} {kind} report(s)"


def scheduler(store: Store, now: datetime, worker: str = "w1") -> Scheduler:
    return Scheduler(store, WorkflowConfig(), Registry(), worker_id=worker, clock=lambda: now)


async def moved_to(store: Store, name: str, next_tick: datetime, **changes: object) -> None:
    """Set a schedule's next tick (and other fields), as if it had been waiting since then."""
    found = await store.get_schedule(name)
    assert found is not None
    assert await store.update_schedule(
        dataclasses.replace(found, next_tick=next_tick, **changes)  # type: ignore[arg-type]
    )


async def ids(store: Store) -> set[str]:
    return {r.id for r in await store.list_workflows(name="report", limit=1000)}


async def test_add_list_pause_resume_and_delete(store: Store) -> None:
    client = DurableClient(store)
    daily = Schedule("0 9 * * *", "Europe/Paris", args=("sales",), kwargs={"copies": 2})
    added = await client.add_schedule("morning", report, daily)
    assert (added.workflow_name, added.cron, added.timezone, added.paused) == (
        "report",
        "0 9 * * *",
        "Europe/Paris",
        False,
    )
    assert added.next_tick > datetime.now(UTC) and added.next_tick.minute == 0
    assert await client.add_schedule("morning", report, daily) == await client.get_schedule(
        "morning"
    ), "adding the same schedule again changes nothing"
    with pytest.raises(ScheduleConflictError, match="schedule 'morning' exists already"):
        await client.add_schedule("morning", report, dataclasses.replace(daily, cron="0 10 * * *"))
    await client.add_schedule("hourly", report, Schedule("@hourly", args=("ops",)))
    assert [s.name for s in await client.list_schedules()] == ["hourly", "morning"]

    await client.pause_schedule("morning")
    assert (await client.get_schedule("morning")).paused
    await moved_to(store, "morning", T0)  # paused since 12:00 on a day long gone
    assert [s.name for s in await store.due_schedules(datetime.now(UTC))] == []
    await client.resume_schedule("morning")
    resumed = await client.get_schedule("morning")
    assert not resumed.paused and resumed.next_tick > datetime.now(UTC), (
        "the ticks it had while paused start nothing"
    )

    await client.delete_schedule("hourly")
    assert [s.name for s in await client.list_schedules()] == ["morning"]
    for call in (
        client.delete_schedule("hourly"),
        client.pause_schedule("nope"),
        client.resume_schedule("nope"),
        client.get_schedule("nope"),
    ):
        with pytest.raises(ScheduleNotFoundError, match="no schedule is named"):
            await call


async def test_each_tick_starts_one_workflow_however_many_schedulers_fire_it(
    store: Store,
) -> None:
    client = DurableClient(store)
    await client.add_schedule("tick", report, Schedule("* * * * * *", args=("tick",)))
    await moved_to(store, "tick", T0)
    now = T0 + timedelta(seconds=2, milliseconds=400)
    started: list[int] = []

    async def fire(worker: str) -> None:
        started.append(await scheduler(store, now, worker).fire_due())

    async with anyio.create_task_group() as group:
        for n in range(4):
            group.start_soon(fire, f"w{n}")
    ticks = [T0 + timedelta(seconds=s) for s in range(3)]
    assert sorted(started) == [0, 0, 0, 3], "one scheduler fired the three due ticks"
    assert await ids(store) == {tick_workflow_id("tick", t) for t in ticks}
    row = await client.get_schedule("tick")
    assert (row.next_tick, row.last_tick) == (T0 + timedelta(seconds=3), ticks[-1])
    assert await scheduler(store, now).fire_due() == 0, "nothing is due any more"

    for tick in ticks:
        started_row = await client.get(tick_workflow_id("tick", tick))
        assert started_row.headers == {
            "durable-schedule": "tick",
            "durable-schedule-tick": tick.isoformat(),
        }
        assert started_row.queue == "default" and json.loads(started_row.input) == {
            "args": ["tick"],
            "kwargs": {},
        }
    runner = WorkflowRunner(store)
    first = client.handle(tick_workflow_id("tick", T0))
    assert await runner.run_until_complete(first) is WorkflowStatus.SUCCEEDED
    assert await first.output() == "1 tick report(s)"


async def test_missed_ticks_are_skipped_or_caught_up_up_to_the_bound(store: Store) -> None:
    client = DurableClient(store)
    await client.add_schedule("skip", report, Schedule("* * * * *", args=("skip",)))
    await client.add_schedule("catch", report, Schedule("* * * * *", catch_up=3, args=("c",)))
    await moved_to(store, "skip", T0)
    await moved_to(store, "catch", T0)
    # No worker ran from 12:00 until 12:10:30.
    now = T0 + timedelta(minutes=10, seconds=30)
    assert await scheduler(store, now).fire_due() == 3
    caught = [T0 + timedelta(minutes=m) for m in (8, 9, 10)]
    assert await ids(store) == {tick_workflow_id("catch", t) for t in caught}
    for name in ("skip", "catch"):
        assert (await client.get_schedule(name)).next_tick == T0 + timedelta(minutes=11)
    assert (await client.get_schedule("skip")).last_tick is None


async def test_a_schedule_paused_after_it_was_read_does_not_fire(store: Store) -> None:
    client = DurableClient(store)
    await client.add_schedule("late", report, Schedule("* * * * *", args=("late",)))
    await moved_to(store, "late", T0)
    [due] = await store.due_schedules(T0 + timedelta(seconds=1))
    await client.pause_schedule("late")
    assert await scheduler(store, T0 + timedelta(seconds=1)).fire(due, T0) == 0
    assert await ids(store) == set()


async def test_declared_schedules_are_saved_at_worker_start_and_keep_their_pause(
    store: Store,
) -> None:
    registry = Registry()

    async def cleanup() -> None: ...

    workflow(name="cleanup", schedule="0 3 * * *", registry=registry)(cleanup)
    workflow(name="unscheduled", registry=registry)(cleanup)
    assert await save_declared(store, registry) == 1
    assert await save_declared(store, registry) == 0, "saving it again changes nothing"
    first = await DurableClient(store).get_schedule("cleanup")
    assert (first.cron, first.timezone, first.next_tick.hour) == ("0 3 * * *", "UTC", 3)

    await DurableClient(store).pause_schedule("cleanup")
    redeployed = Registry()
    workflow(
        name="cleanup", schedule="0 3 * * *", schedule_timezone="Asia/Tokyo", registry=redeployed
    )(cleanup)
    assert await save_declared(store, redeployed) == 1
    changed: ScheduleRecord = await DurableClient(store).get_schedule("cleanup")
    assert changed.paused, "a redeploy does not resume a paused schedule"
    assert (changed.timezone, changed.next_tick.hour) == ("Asia/Tokyo", 18)  # 03:00 JST


@pytest.mark.parametrize("sqlite_or_postgres", ["postgresql"], indirect=True)
async def test_a_store_that_announces_changes_wakes_the_scheduler_for_them_not_on_a_poll(
    sqlite_or_postgres: Store,
) -> None:
    """On PostgreSQL the scheduler reads the schedules, then sleeps until one is added or
    a tick falls due: no look at the table every poll interval while there is none."""
    store = sqlite_or_postgres
    assert isinstance(store, ScheduleFeed), "PostgreSQL announces schedule changes"
    looks = 0
    next_schedule_tick = store.next_schedule_tick

    async def counted() -> datetime | None:
        nonlocal looks
        looks += 1
        return await next_schedule_tick()

    store.next_schedule_tick = counted  # type: ignore[method-assign]
    fast = WorkflowConfig(poll_interval_ms=20)
    running = Scheduler(store, fast, Registry(), worker_id="w1")
    claimer = cast(Claimer, store)  # a worker's first claim opens the LISTEN connection
    routes = [Route(Queue("default"), ("report",), 1)]
    await claimer.claim(worker_id="w1", limit=1, lease_seconds=30, routes=routes)
    async with anyio.create_task_group() as group:
        group.start_soon(running.run)
        await anyio.sleep(1.0)
        assert looks <= 2, f"{looks} looks at the schedules in 1 s without any (poll 20 ms)"
        await DurableClient(store).add_schedule(
            "soon", report, Schedule("* * * * * *", args=("soon",))
        )
        with anyio.fail_after(120):
            while running.fired == 0:  # noqa: ASYNC110 (the scheduler sets no event)
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    assert await ids(store) != set()


@workflow(name="dated_report")
async def dated_report(kind: str, scheduled_at: datetime) -> list[str]:
    ctx = WorkflowContext.current()
    assert ctx is not None and ctx.scheduled_at == scheduled_at
    return [kind, scheduled_at.isoformat()]


@workflow(name="undated_report")
async def undated_report(kind: str) -> str | None:
    ctx = WorkflowContext.current()
    assert ctx is not None
    return None if ctx.scheduled_at is None else ctx.scheduled_at.isoformat()


async def test_a_scheduled_workflow_receives_its_tick_without_reading_headers(
    store: Store,
) -> None:
    """A ``scheduled_at`` parameter is the schedule's to fill (adding the schedule does not
    ask for it); any body reads the tick from its context; a start by hand has none."""
    client = DurableClient(store)
    await client.add_schedule("dated", dated_report, Schedule("0 * * * *", args=("sales",)))
    await client.add_schedule("undated", undated_report, Schedule("0 * * * *", args=("ops",)))
    await moved_to(store, "dated", T0)
    await moved_to(store, "undated", T0)
    assert await scheduler(store, T0 + timedelta(seconds=1)).fire_due() == 2
    runner = WorkflowRunner(store)
    dated = client.handle(tick_workflow_id("dated", T0))
    undated = client.handle(tick_workflow_id("undated", T0))
    for handle in (dated, undated):
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await dated.output() == ["sales", T0.isoformat()]
    assert await undated.output() == T0.isoformat()
    by_hand = await client.start_workflow(undated_report, "ad hoc")
    assert await runner.run_until_complete(by_hand) is WorkflowStatus.SUCCEEDED
    assert await by_hand.output() is None
