"""The schedule methods of :class:`~durable_core.caller.sync.SyncClient`, each blocking on
the async method of :class:`~durable_core.caller.schedule_admin.ScheduleMethods` it names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

from ..definitions.schedules import Overlap, Schedule, ScheduleRecord
from .client import DurableClient
from .handle import WorkflowHandle
from .sync_handle import SyncHandle

T = TypeVar("T")
R = TypeVar("R")


class _Blocking(Protocol):
    """What the methods use of the :class:`~durable_core.caller.sync.SyncClient` they are
    part of."""

    @property
    def client(self) -> DurableClient: ...

    def call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T: ...

    def _wrap(self, handle: WorkflowHandle[R]) -> SyncHandle[R]: ...


class SyncScheduleMethods:
    """Blocking counterparts of the client's schedule methods."""

    def add_schedule(
        self: _Blocking, name: str, fn: Callable[..., Awaitable[Any]], schedule: Schedule | str
    ) -> ScheduleRecord:
        """Start ``fn`` on every tick of ``schedule``; see :meth:`DurableClient.add_schedule`."""
        return self.call(self.client.add_schedule, name, fn, schedule)

    def get_schedule(self: _Blocking, name: str) -> ScheduleRecord:
        """The schedule ``name``."""
        return self.call(self.client.get_schedule, name)

    def list_schedules(self: _Blocking) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        return self.call(self.client.list_schedules)

    def pause_schedule(self: _Blocking, name: str) -> None:
        """Stop starting workflows on ``name``'s ticks until it is resumed."""
        self.call(self.client.pause_schedule, name)

    def resume_schedule(self: _Blocking, name: str) -> None:
        """Start workflows on ``name``'s ticks again, from its next tick after now."""
        self.call(self.client.resume_schedule, name)

    def delete_schedule(self: _Blocking, name: str) -> None:
        """Delete the schedule ``name`` (not the workflows it started)."""
        self.call(self.client.delete_schedule, name)

    def trigger_schedule(self: _Blocking, name: str) -> SyncHandle[Any] | None:
        """Start the workflow of schedule ``name`` now, as its overlap policy lets it (see
        :meth:`DurableClient.trigger_schedule`)."""
        handle = self.call(self.client.trigger_schedule, name)
        return None if handle is None else self._wrap(handle)

    def backfill_schedule(
        self: _Blocking,
        name: str,
        start: datetime,
        end: datetime,
        *,
        overlap: Overlap | str = Overlap.ALLOW_ALL,
    ) -> list[str]:
        """Start the runs of ``name``'s ticks from ``start`` to ``end`` (excluded); the ids
        started. See :meth:`DurableClient.backfill_schedule`."""
        return self.call(self.client.backfill_schedule, name, start, end, overlap=overlap)
