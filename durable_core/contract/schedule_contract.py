"""``ScheduleContract``: what a store must do for schedules (part of ``StoreContract``).

The rows of ``workflow_schedules`` as store operations: adding, reading,
updating, pausing, deleting, and firing a tick exactly once when several
workers try at the same moment.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from ..definitions.schedules import ScheduleRecord, tick_workflow_id
from ..seams.store import Store
from .base import ContractBase
from .support import new_workflow

OPERATIONS = (
    "add_schedule",
    "update_schedule",
    "get_schedule",
    "list_schedules",
    "set_schedule_paused",
    "delete_schedule",
    "due_schedules",
    "next_schedule_tick",
    "fire_schedule",
)
"""The store operations schedules need (schema version 4)."""

T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def _require(store: Store) -> None:
    missing = [name for name in OPERATIONS if not callable(getattr(store, name, None))]
    if missing:
        pytest.fail(
            f"{type(store).__name__} lacks {', '.join(f'{name}()' for name in missing)}: the "
            "Store protocol needs them for schedules. Implement them, or build the store on "
            "durable_core.sql.SQLStore, which has them.",
            pytrace=False,
        )


def schedule_row(name: str, next_tick: datetime = T0, **changes: object) -> ScheduleRecord:
    """A schedule row every second from ``next_tick``."""
    row = ScheduleRecord(
        name=name,
        workflow_name="contract.scheduled",
        cron="* * * * * *",
        timezone="Europe/Paris",
        input='{"args": [1], "kwargs": {}}',
        queue=None,
        paused=False,
        catch_up=0,
        next_tick=next_tick,
        last_tick=None,
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


class ScheduleContract(ContractBase):
    """Tests for the schedule operations; :class:`~durable_core.contract.StoreContract`
    includes them."""

    async def test_a_schedule_is_added_once_and_read_back_as_written(
        self, durable_store: Store
    ) -> None:
        _require(durable_store)
        row = schedule_row("nightly", catch_up=3, queue="reports")
        assert await durable_store.add_schedule(row) is True
        assert await durable_store.add_schedule(schedule_row("nightly", cron="@daily")) is False
        found = await durable_store.get_schedule("nightly")
        assert found is not None
        assert dataclasses.replace(found, created_at=T0, updated_at=T0) == row
        assert found.created_at.tzinfo is not None and found.next_tick.tzinfo is not None
        assert await durable_store.get_schedule("missing") is None
        await durable_store.add_schedule(schedule_row("aardvark"))
        assert [s.name for s in await durable_store.list_schedules()] == ["aardvark", "nightly"]

    async def test_update_pause_resume_and_delete(self, durable_store: Store) -> None:
        _require(durable_store)
        await durable_store.add_schedule(schedule_row("s"))
        changed = schedule_row("s", T0 + timedelta(hours=1), cron="0 * * * *", catch_up=2)
        assert await durable_store.update_schedule(changed) is True
        assert await durable_store.update_schedule(schedule_row("other")) is False

        assert await durable_store.set_schedule_paused("s", True) is True
        assert await durable_store.set_schedule_paused("s", True) is True, "already paused"
        paused = await durable_store.get_schedule("s")
        assert paused is not None and paused.paused and paused.next_tick == changed.next_tick
        assert await durable_store.update_schedule(changed) is True
        kept = await durable_store.get_schedule("s")
        assert kept is not None and kept.paused, "an update does not resume"
        resume_at = T0 + timedelta(days=1)
        assert await durable_store.set_schedule_paused("s", False, next_tick=resume_at) is True
        resumed = await durable_store.get_schedule("s")
        assert resumed is not None and not resumed.paused
        assert (resumed.cron, resumed.catch_up, resumed.next_tick) == ("0 * * * *", 2, resume_at)
        assert await durable_store.set_schedule_paused("missing", True) is False

        assert await durable_store.delete_schedule("s") is True
        assert await durable_store.delete_schedule("s") is False
        assert await durable_store.list_schedules() == []

    async def test_due_schedules_and_the_next_tick_skip_paused_ones(
        self, durable_store: Store
    ) -> None:
        _require(durable_store)
        assert await durable_store.next_schedule_tick() is None
        await durable_store.add_schedule(schedule_row("later", T0 + timedelta(minutes=5)))
        await durable_store.add_schedule(schedule_row("soon", T0 + timedelta(minutes=1)))
        await durable_store.add_schedule(schedule_row("paused", T0, paused=True))
        assert await durable_store.next_schedule_tick() == T0 + timedelta(minutes=1)
        due = await durable_store.due_schedules(T0 + timedelta(minutes=5))
        assert [s.name for s in due] == ["soon", "later"]
        assert await durable_store.due_schedules(T0 + timedelta(seconds=59)) == []
        assert [
            s.name for s in await durable_store.due_schedules(T0 + timedelta(hours=1), limit=1)
        ] == ["soon"]

    async def test_a_tick_is_fired_once_by_concurrent_workers_with_its_workflows(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        _require(durable_store)
        await durable_store.add_schedule(schedule_row("tick"))
        rows = [
            new_workflow(
                "contract.scheduled", id=tick_workflow_id("tick", T0 + timedelta(seconds=s))
            )
            for s in range(2)
        ]
        results: list[bool] = []

        async def fire(store: Store) -> None:
            results.append(
                await store.fire_schedule(
                    "tick",
                    expected=T0,
                    next_tick=T0 + timedelta(seconds=2),
                    fired=T0 + timedelta(seconds=1),
                    workflows=rows,
                )
            )

        async with anyio.create_task_group() as group:
            for n in range(6):
                group.start_soon(fire, durable_store if n % 2 else durable_second_store)
        assert sorted(results) == [False] * 5 + [True]
        started = await durable_store.list_workflows(name="contract.scheduled", limit=10)
        assert sorted(r.id for r in started) == sorted(r.id for r in rows)
        found = await durable_store.get_schedule("tick")
        assert found is not None
        assert (found.next_tick, found.last_tick) == (
            T0 + timedelta(seconds=2),
            T0 + timedelta(seconds=1),
        )

    async def test_a_paused_or_moved_schedule_does_not_fire(self, durable_store: Store) -> None:
        _require(durable_store)
        await durable_store.add_schedule(schedule_row("p"))
        await durable_store.set_schedule_paused("p", True)
        row = new_workflow("contract.scheduled")
        fire = {"expected": T0, "next_tick": T0 + timedelta(seconds=1), "fired": T0}
        assert await durable_store.fire_schedule("p", **fire, workflows=[row]) is False
        await durable_store.set_schedule_paused("p", False)
        assert (
            await durable_store.fire_schedule(
                "p", **{**fire, "expected": T0 - timedelta(seconds=1)}, workflows=[row]
            )
            is False
        )
        assert await durable_store.get_workflow(row.id) is None, "nothing was started"
        assert await durable_store.fire_schedule("p", **fire, workflows=[]) is True
        found = await durable_store.get_schedule("p")
        assert found is not None and found.next_tick == T0 + timedelta(seconds=1)
