"""Overlap policies, triggers and backfills, in-process on SQLite with an owned clock
(the store operations are in the contract suite, on every store; the crash test with
worker processes is in tests/worker/test_schedule_overlap_processes.py)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

import durable_core
from durable_core import (
    ConfigurationError,
    DurableClient,
    Overlap,
    Schedule,
    WorkflowStatus,
    current_store,
    workflow,
)
from durable_core.caller.schedule_admin import BACKFILL_BATCH
from durable_core.definitions.registry import Registry
from durable_core.definitions.schedules import MAX_BACKFILL, tick_workflow_id
from durable_core.runtime.config import WorkflowConfig
from durable_core.runtime.scheduler import Scheduler
from durable_core.seams.operators import WorkflowFilter
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


@workflow(name="overlap.job")
async def job(kind: str) -> str:
    return kind


async def every_second(client: DurableClient, name: str, overlap: Overlap) -> None:
    """Schedule ``name`` every second, its next tick at T0."""
    await client.add_schedule(name, job, Schedule("* * * * * *", args=["x"], overlap=overlap))
    found = await client.get_schedule(name)
    assert isinstance(client.store, Store)
    assert await client.store.update_schedule(dataclasses.replace(found, next_tick=T0))


def scheduler(client: DurableClient, now: datetime) -> Scheduler:
    assert isinstance(client.store, Store)
    return Scheduler(client.store, WorkflowConfig(), Registry(), worker_id="w", clock=lambda: now)


async def started(client: DurableClient) -> list[str]:
    return sorted(r.id for r in await client.list_workflows(name=job.name, limit=50))


async def test_skip_starts_no_tick_while_the_latest_run_has_not_finished(
    sqlite_store: SQLiteStore,
) -> None:
    client = DurableClient(sqlite_store)
    await every_second(client, "s", Overlap.SKIP)
    first = tick_workflow_id("s", T0)
    assert await scheduler(client, T0).fire_due() == 1
    assert await scheduler(client, T0 + SECOND).fire_due() == 0, "the latest run is pending"
    assert await client.trigger_schedule("s") is None
    found = await client.get_schedule("s")
    assert (found.latest_id, found.next_tick, found.buffered_tick) == (first, T0 + 2 * SECOND, None)
    await client.cancel(first)
    assert await scheduler(client, T0 + 2 * SECOND).fire_due() == 1
    assert await started(client) == sorted([first, tick_workflow_id("s", T0 + 2 * SECOND)])


async def test_buffer_one_keeps_the_first_tick_and_starts_it_when_the_latest_ends(
    sqlite_store: SQLiteStore,
) -> None:
    client = DurableClient(sqlite_store)
    await every_second(client, "b", Overlap.BUFFER_ONE)
    assert await scheduler(client, T0).fire_due() == 1
    assert await scheduler(client, T0 + SECOND).fire_due() == 0
    assert await scheduler(client, T0 + 2 * SECOND).fire_due() == 0, "dropped: one is kept"
    held = await client.get_schedule("b")
    assert (held.latest_id, held.buffered_tick) == (tick_workflow_id("b", T0), T0 + SECOND)
    # Three ticks due together: the first starts, the second is kept, the third dropped.
    await client.cancel(tick_workflow_id("b", T0))
    released = tick_workflow_id("b", T0 + SECOND)
    assert await scheduler(client, T0 + 2 * SECOND).fire_due() == 1
    assert await scheduler(client, T0 + 2 * SECOND).fire_due() == 0, "released once"
    after = await client.get_schedule("b")
    assert (after.latest_id, after.buffered_tick) == (released, None)
    assert await started(client) == sorted([tick_workflow_id("b", T0), released])


async def test_allow_all_starts_every_tick_and_records_the_latest(
    sqlite_store: SQLiteStore,
) -> None:
    client = DurableClient(sqlite_store)
    await every_second(client, "a", Overlap.ALLOW_ALL)
    assert await scheduler(client, T0 + SECOND).fire_due() == 2
    triggered = await client.trigger_schedule("a")
    assert triggered is not None
    assert (await client.get_schedule("a")).latest_id == triggered.id
    assert len(await started(client)) == 3


async def test_a_backfill_starts_each_missed_tick_once_and_refuses_bad_windows(
    sqlite_store: SQLiteStore,
) -> None:
    client = DurableClient(sqlite_store)
    await client.add_schedule("hourly", job, Schedule("0 * * * *", args=["x"]))
    start = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    ticks = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in range(1, 4)]
    ids = await client.backfill_schedule("hourly", start, ticks[-1])
    assert ids == [tick_workflow_id("hourly", t) for t in ticks[:2]], "the end is excluded"
    wider = await client.backfill_schedule("hourly", start, ticks[-1] + SECOND)
    assert wider == [tick_workflow_id("hourly", ticks[-1])], "a repeat starts nothing twice"
    record = await client.get(ids[0])
    assert (
        record.headers is not None
        and record.headers["durable-schedule-tick"] == ticks[0].isoformat()
    )

    now = datetime.now(UTC)
    for bad_start, bad_end, says in (
        (ticks[1], ticks[0], "starts before it ends"),
        (start, now + timedelta(hours=2), "has passed"),
        (start.replace(tzinfo=None), ticks[0], "aware datetime"),
        (start, start + (MAX_BACKFILL + 1) * timedelta(hours=1), f"more than {MAX_BACKFILL}"),
    ):
        with pytest.raises(ConfigurationError, match=says):
            await client.backfill_schedule("hourly", bad_start, bad_end)
    with pytest.raises(ConfigurationError, match="overlap is one of skip, buffer_one, allow_all"):
        await client.backfill_schedule("hourly", start, ticks[0], overlap="sometimes")
    with pytest.raises(ConfigurationError, match="overlap is one of"):
        Schedule("@daily", overlap="never")  # type: ignore[arg-type]


async def test_a_backfill_under_buffer_one_starts_the_first_and_keeps_the_second(
    sqlite_store: SQLiteStore,
) -> None:
    client = DurableClient(sqlite_store)
    await client.add_schedule("daily", job, Schedule("0 0 * * *", args=["x"]))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ids = await client.backfill_schedule(
        "daily", start, start + timedelta(days=5), overlap=Overlap.BUFFER_ONE
    )
    assert ids == [tick_workflow_id("daily", start)]
    found = await client.get_schedule("daily")
    assert (found.latest_id, found.buffered_tick) == (ids[0], start + timedelta(days=1))
    assert await client.backfill_schedule("daily", start, start + SECOND, overlap="skip") == []


async def test_the_dashboard_backfills_and_says_what_a_held_trigger_did(
    sqlite_store: SQLiteStore,
) -> None:
    import httpx

    from durable_core.dashboard import create_app

    client = DurableClient(sqlite_store)
    await client.add_schedule("d", job, Schedule("0 0 * * *", args=["x"], overlap=Overlap.SKIP))
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
        window = {"schedule": "d", "start": "2026-01-01T00:00", "end": "2026-01-03T00:00"}
        filled = await web.post("/schedules/backfill", data=window, follow_redirects=True)
        assert "Backfilled: started 2 workflows" in filled.text
        assert await started(client) == sorted(
            tick_workflow_id("d", datetime(2026, 1, day, tzinfo=UTC)) for day in (1, 2)
        )
        bad = await web.post("/schedules/backfill", data={**window, "start": "soon"})
        assert bad.status_code == 400 and "a backfill&#39;s start is a moment" in bad.text
        assert (await web.post("/schedules/trigger", data={"schedule": "d"})).status_code == 303
        held = await web.post("/schedules/trigger", data={"schedule": "d"}, follow_redirects=True)
        assert "the trigger started nothing (skip)" in held.text


async def test_a_backfill_of_the_most_ticks_is_written_in_batches_once(
    sqlite_store: SQLiteStore,
) -> None:
    client = DurableClient(sqlite_store)
    await client.add_schedule("minutely", job, Schedule("* * * * *", args=["x"]))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + MAX_BACKFILL * timedelta(minutes=1)
    ids = await client.backfill_schedule("minutely", start, end)
    assert len(ids) == len(set(ids)) == MAX_BACKFILL > 4 * BACKFILL_BATCH
    assert ids[-1] == tick_workflow_id("minutely", end - timedelta(minutes=1))
    assert await client.backfill_schedule("minutely", start, end) == []
    assert await client.count_workflows(WorkflowFilter(name=job.name)) == MAX_BACKFILL


@workflow(name="overlap.triggers")
async def triggers(name: str) -> list[str]:
    client = DurableClient(current_store())
    triggered = await client.trigger_schedule(name)
    await durable_core.sleep(timedelta(hours=1))  # a suspension: the body is replayed after
    backfilled = await client.backfill_schedule(name, T0 - 3 * SECOND, T0)
    await durable_core.sleep(timedelta(hours=1))
    assert triggered is not None
    return [triggered.id, *backfilled]


async def test_a_body_triggers_and_backfills_once_per_call_site(
    sqlite_store: SQLiteStore,
) -> None:
    """Through the attempt: a replayed body neither triggers again (a new tick, a new
    run) nor backfills again."""
    client = DurableClient(sqlite_store)
    await every_second(client, "in-body", Overlap.ALLOW_ALL)
    handle = await client.start_workflow(triggers, "in-body")
    runner = WorkflowRunner(sqlite_store)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    ran = await handle.output()
    assert len(ran) == 4 and ran[1:] == [
        tick_workflow_id("in-body", T0 - n * SECOND) for n in (3, 2, 1)
    ]
    assert await started(client) == sorted(ran), "one trigger and three ticks, once each"
