"""The store's role for schedules' overlap policies (schema version 9): firing a tick
on the condition that the schedule's latest run is still the one read, and keeping a
buffered tick until that run ends. Part of the seam of :mod:`durable_core.seams.store`
(which re-exports it); every SQL store has it, and the scheduler and the client check
for it with ``isinstance``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..definitions.schedules import ScheduleRecord
from .records import NewWorkflow, WorkflowStatus


@runtime_checkable
class ScheduleOverlaps(Protocol):
    """A store that keeps each schedule's latest run and buffered tick (schema version 9)."""

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
        """In one transaction, if the schedule still has the next tick ``expected``, the
        paused state ``paused`` and the latest run ``latest`` (``None``: none): move its
        next tick to ``next_tick`` (``fired``, when given, its last tick), enqueue
        ``workflows`` (the last becomes its latest run) and keep ``buffer`` as its
        buffered tick unless it has one. ``False``, writing nothing, when the row changed
        (another worker fired it, or a trigger started a run) or is gone."""
        ...

    async def buffered_schedules(
        self, *, limit: int = 100
    ) -> list[tuple[ScheduleRecord, WorkflowStatus | None]]:
        """The unpaused schedules holding a buffered tick, each with its latest run's
        status (``None``: no such workflow), oldest buffered tick first."""
        ...

    async def release_buffered_tick(
        self, name: str, *, tick: datetime, latest: str | None, workflow: NewWorkflow
    ) -> bool:
        """In one transaction, if the schedule is unpaused and still holds the buffered
        tick ``tick`` and the latest run ``latest``: clear the buffered tick and enqueue
        ``workflow``, its latest run from then on. ``False``, writing nothing, otherwise."""
        ...
