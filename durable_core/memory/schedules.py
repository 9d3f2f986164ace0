"""The memory store's schedules: saved, listed, paused, fired, and their overlap
policies' latest run and buffered tick.

The rules are :mod:`durable_core.sql.schedules`' and
:mod:`durable_core.sql.schedule_overlap`'s: a tick fires only while the row still holds
what the caller read, and enqueues its workflows in the same step, so of several
callers acting on one reading, one writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..definitions.schedules import ScheduleRecord
from ..seams.records import NewWorkflow, WorkflowStatus
from ..sql.repeats import unique_starts
from ..sql.schedules import CATCH_UP, SKIP, schedule_from_row
from .tables import Row, Tables, now
from .talk import TalkOperations

_DEFINITION = (
    "workflow_name",
    "cron",
    "timezone",
    "input",
    "queue",
    "catch_up",
    "next_tick",
    "overlap",
)


def _definition(record: ScheduleRecord) -> Row:
    return {
        "workflow_name": record.workflow_name,
        "cron": record.cron,
        "timezone": record.timezone,
        "input": record.input,
        "queue": record.queue,
        "catch_up": record.catch_up,
        "missed": CATCH_UP if record.catch_up else SKIP,
        "next_tick": record.next_tick,
        "overlap": record.overlap.value,
    }


class ScheduleOperations(TalkOperations):
    """Add, read, pause, delete and fire schedules; buffer and release ticks."""

    async def add_schedule(self, schedule: ScheduleRecord) -> bool:
        """Insert ``schedule`` unless one has its name; whether it was inserted."""
        t = await self._begin()
        with t.lock:
            if schedule.name in t.schedules:
                return False
            at = now()
            t.schedules[schedule.name] = {
                "name": schedule.name,
                **_definition(schedule),
                "paused": schedule.paused,
                "created_at": at,
                "updated_at": at,
                "last_tick": None,
                "latest_id": None,
                "buffered_tick": None,
            }
        return True

    async def update_schedule(self, schedule: ScheduleRecord) -> bool:
        """Replace what the schedule of that name starts and when (not whether it is
        paused); whether it exists."""
        t = await self._begin()
        with t.lock:
            row = t.schedules.get(schedule.name)
            if row is None:
                return False
            row.update(_definition(schedule), updated_at=now())
        return True

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule named ``name``, or ``None``."""
        t = await self._begin()
        with t.lock:
            row = t.schedules.get(name)
            return None if row is None else schedule_from_row(row)

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        t = await self._begin()
        with t.lock:
            return [schedule_from_row(row) for _, row in sorted(t.schedules.items())]

    async def set_schedule_paused(
        self, name: str, paused: bool, *, next_tick: datetime | None = None
    ) -> bool:
        """Pause or resume a schedule (moving its next tick to ``next_tick`` if given);
        whether it exists."""
        t = await self._begin()
        with t.lock:
            row = t.schedules.get(name)
            if row is None:
                return False
            row.update(paused=paused, updated_at=now())
            if next_tick is not None:
                row["next_tick"] = next_tick
        return True

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule (the workflows it started stay); whether it existed."""
        t = await self._begin()
        with t.lock:
            return t.schedules.pop(name, None) is not None

    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        """Unpaused schedules whose next tick is at or before ``now``, soonest first."""
        t = await self._begin()
        with t.lock:
            due = [r for r in t.schedules.values() if not r["paused"] and r["next_tick"] <= now]
            due.sort(key=lambda r: r["next_tick"])
            return [schedule_from_row(row) for row in due[: max(limit, 0)]]

    async def next_schedule_tick(self) -> datetime | None:
        """The soonest next tick of any unpaused schedule."""
        t = await self._begin()
        with t.lock:
            ticks = [r["next_tick"] for r in t.schedules.values() if not r["paused"]]
        return min(ticks, default=None)

    def _fire(
        self,
        t: Tables,
        row: Row,
        *,
        next_tick: datetime,
        fired: datetime | None,
        workflows: Sequence[NewWorkflow],
    ) -> None:
        fresh = self._check_new(t, unique_starts(workflows))
        at = now()
        row.update(next_tick=next_tick, updated_at=at)
        if fired is not None:
            row["last_tick"] = fired
        if workflows:
            row["latest_id"] = workflows[-1].id
        self._insert(t, fresh, at)

    async def fire_schedule(
        self,
        name: str,
        *,
        expected: datetime,
        next_tick: datetime,
        fired: datetime | None,
        workflows: Sequence[NewWorkflow],
    ) -> bool:
        """If the schedule is unpaused and its next tick is still ``expected``, move it to
        ``next_tick`` and enqueue ``workflows``, at once; ``False`` otherwise."""
        t = await self._begin()
        with t.lock:
            row = t.schedules.get(name)
            if row is None or row["paused"] or row["next_tick"] != expected:
                return False
            self._fire(t, row, next_tick=next_tick, fired=fired, workflows=workflows)
        return True

    async def fire_schedule_overlap(
        self,
        name: str,
        *,
        expected: datetime,
        next_tick: datetime,
        paused: bool,
        latest: str | None,
        fired: datetime | None,
        workflows: Sequence[NewWorkflow],
        buffer: datetime | None,
    ) -> bool:
        """See :meth:`~durable_core.seams.store.ScheduleOverlaps.fire_schedule_overlap`."""
        t = await self._begin()
        with t.lock:
            row = t.schedules.get(name)
            if (
                row is None
                or row["latest_id"] != latest
                or bool(row["paused"]) != paused
                or row["next_tick"] != expected
            ):
                return False
            self._fire(t, row, next_tick=next_tick, fired=fired, workflows=workflows)
            if row["buffered_tick"] is None:
                row["buffered_tick"] = buffer
        return True

    async def buffered_schedules(
        self, *, limit: int = 100
    ) -> list[tuple[ScheduleRecord, WorkflowStatus | None]]:
        """See :meth:`~durable_core.seams.store.ScheduleOverlaps.buffered_schedules`."""
        t = await self._begin()
        with t.lock:
            rows = [
                r
                for r in t.schedules.values()
                if r["buffered_tick"] is not None and not r["paused"]
            ]
            rows.sort(key=lambda r: r["buffered_tick"])
            found = []
            for row in rows[: max(limit, 0)]:
                latest = t.workflows.get(row["latest_id"] or "")
                status = None if latest is None else WorkflowStatus(latest["status"])
                found.append((schedule_from_row(row), status))
        return found

    async def release_buffered_tick(
        self, name: str, *, tick: datetime, latest: str | None, workflow: NewWorkflow
    ) -> bool:
        """See :meth:`~durable_core.seams.store.ScheduleOverlaps.release_buffered_tick`."""
        t = await self._begin()
        with t.lock:
            row = t.schedules.get(name)
            if (
                row is None
                or row["latest_id"] != latest
                or row["paused"]
                or row["buffered_tick"] != tick
            ):
                return False
            fresh = self._check_new(t, [workflow])
            at = now()
            row.update(buffered_tick=None, latest_id=workflow.id, updated_at=at)
            self._insert(t, fresh, at)
        return True
