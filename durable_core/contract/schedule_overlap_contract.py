"""``ScheduleOverlapContract``: what a store with the
:class:`~durable_core.seams.store.ScheduleOverlaps` role must do (schema version 9)::

    class TestMyStore(StoreContract, NoClaimerContract, ScheduleOverlapContract):
        pass

A schedule keeps its overlap policy, its latest run and one buffered tick; firing and
releasing are conditional on the row as read, so of two callers on one reading one
writes, and a workflow is started by the write that wins only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest

from ..definitions.schedules import Overlap, tick_workflow_id
from ..seams.records import WorkflowStatus
from ..seams.store import ScheduleOverlaps, Store
from .schedule_contract import T0, schedule_row
from .support import new_workflow


def _overlaps(store: Store) -> ScheduleOverlaps:
    if not isinstance(store, ScheduleOverlaps):
        pytest.fail(
            f"{type(store).__name__} is not a ScheduleOverlaps store (fire_schedule_overlap, "
            "buffered_schedules, release_buffered_tick): build it on durable_core.sql.SQLStore, "
            "or leave ScheduleOverlapContract out",
            pytrace=False,
        )
    return store


class ScheduleOverlapContract:
    """Tests for the overlap policies' store operations."""

    async def test_the_policy_is_kept_and_a_fire_records_the_latest_run(
        self, durable_store: Store
    ) -> None:
        _overlaps(durable_store)
        await durable_store.add_schedule(schedule_row("kept", overlap=Overlap.BUFFER_ONE))
        found = await durable_store.get_schedule("kept")
        assert found is not None
        assert (found.overlap, found.latest_id, found.buffered_tick) == (
            Overlap.BUFFER_ONE,
            None,
            None,
        )
        assert await durable_store.update_schedule(schedule_row("kept", overlap=Overlap.SKIP))
        row = new_workflow("contract.scheduled", id=tick_workflow_id("kept", T0))
        fire: dict[str, Any] = {"expected": T0, "next_tick": T0 + timedelta(seconds=1), "fired": T0}
        assert await durable_store.fire_schedule("kept", **fire, workflows=[row]) is True
        fired = await durable_store.get_schedule("kept")
        assert fired is not None and (fired.overlap, fired.latest_id) == (Overlap.SKIP, row.id)

    async def test_a_fire_holds_the_latest_run_read_and_buffers_one_tick(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        store = _overlaps(durable_store)
        await durable_store.add_schedule(schedule_row("b", overlap=Overlap.BUFFER_ONE))
        first = new_workflow("contract.scheduled", id=tick_workflow_id("b", T0))
        results: list[bool] = []

        async def fire(on: Store) -> None:
            results.append(
                await _overlaps(on).fire_schedule_overlap(
                    "b",
                    expected=T0,
                    next_tick=T0 + timedelta(seconds=1),
                    paused=False,
                    latest=None,
                    fired=T0,
                    workflows=[first],
                    buffer=None,
                )
            )

        async with anyio.create_task_group() as group:
            for n in range(4):
                group.start_soon(fire, durable_store if n % 2 else durable_second_store)
        assert sorted(results) == [False] * 3 + [True]
        found = await durable_store.get_schedule("b")
        assert found is not None
        assert (found.next_tick, found.last_tick, found.latest_id) == (
            T0 + timedelta(seconds=1),
            T0,
            first.id,
        )
        one = T0 + timedelta(seconds=1)
        later: dict[str, Any] = {
            "next_tick": T0 + timedelta(seconds=2),
            "paused": False,
            "fired": None,
        }
        stale: dict[str, Any] = {
            **later,
            "expected": one,
            "latest": None,
            "workflows": [],
            "buffer": one,
        }
        assert await store.fire_schedule_overlap("b", **stale) is False, "another latest run"
        paused: dict[str, Any] = {**stale, "latest": first.id, "paused": True}
        assert await store.fire_schedule_overlap("b", **paused) is False, "not paused"
        buffering: dict[str, Any] = {**stale, "latest": first.id}
        assert await store.fire_schedule_overlap("b", **buffering) is True
        two = T0 + timedelta(seconds=2)
        again: dict[str, Any] = {**buffering, "expected": two, "next_tick": two, "buffer": two}
        assert await store.fire_schedule_overlap("b", **again) is True
        held = await durable_store.get_schedule("b")
        assert held is not None
        assert (held.buffered_tick, held.latest_id) == (one, first.id), "the first kept"
        started = await durable_store.list_workflows(name="contract.scheduled", limit=10)
        assert [r.id for r in started] == [first.id]

    async def test_a_buffered_tick_is_listed_with_the_latest_status_and_released_once(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        store = _overlaps(durable_store)
        await durable_store.add_schedule(schedule_row("r", overlap=Overlap.BUFFER_ONE))
        await durable_store.add_schedule(schedule_row("gone", overlap=Overlap.BUFFER_ONE))
        await durable_store.add_schedule(schedule_row("quiet"))
        latest = new_workflow("contract.scheduled", id=tick_workflow_id("r", T0))
        one = T0 + timedelta(seconds=1)
        base: dict[str, Any] = {
            "expected": T0,
            "next_tick": one,
            "paused": False,
            "latest": None,
            "fired": T0,
        }
        assert await store.fire_schedule_overlap("r", **base, workflows=[latest], buffer=None)
        keep: dict[str, Any] = {
            **base,
            "expected": one,
            "latest": latest.id,
            "fired": None,
            "workflows": [],
        }
        assert await store.fire_schedule_overlap("r", **keep, buffer=one)
        assert await store.fire_schedule_overlap("gone", **base, workflows=[], buffer=T0)
        listed = await store.buffered_schedules()
        assert [(s.name, s.buffered_tick, status) for s, status in listed] == [
            ("gone", T0, None),
            ("r", one, WorkflowStatus.PENDING),
        ]
        await durable_store.set_schedule_paused("gone", True)
        assert [s.name for s, _ in await store.buffered_schedules(limit=5)] == ["r"]

        await durable_store.cancel_workflow(latest.id, "done")
        [(_, status)] = await store.buffered_schedules()
        assert status is WorkflowStatus.CANCELLED
        follow = new_workflow("contract.scheduled", id=tick_workflow_id("r", one))
        assert (
            await store.release_buffered_tick("r", tick=one, latest=None, workflow=follow) is False
        ), "another latest run"
        results: list[bool] = []

        async def release(on: Store) -> None:
            released = await _overlaps(on).release_buffered_tick(
                "r", tick=one, latest=latest.id, workflow=follow
            )
            results.append(released)

        async with anyio.create_task_group() as group:
            for n in range(4):
                group.start_soon(release, durable_store if n % 2 else durable_second_store)
        assert sorted(results) == [False] * 3 + [True]
        found = await durable_store.get_schedule("r")
        assert found is not None and (found.buffered_tick, found.latest_id) == (None, follow.id)
        assert await store.buffered_schedules() == []
        record = await durable_store.get_workflow(follow.id)
        assert record is not None and record.status is WorkflowStatus.PENDING
        assert found.next_tick == one, "a release leaves the next tick"
