"""The on-call methods of :class:`~durable_core.caller.sync.SyncClient`, each blocking on
the async method of :class:`~durable_core.caller.oncall.OnCallMethods` it names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from ..seams.operators import Activity, ErrorCount, Unserved, WorkerRecord, WorkflowFilter
from ..seams.records import StepRecord, WorkflowRecord, WorkflowStatus
from .client import DurableClient

T = TypeVar("T")


class _Blocking(Protocol):
    """What the methods use of the :class:`~durable_core.caller.sync.SyncClient` they are
    part of."""

    @property
    def client(self) -> DurableClient: ...

    def call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T: ...


class SyncOnCallMethods:
    """Blocking counterparts of the client's counts, bulk actions and worker rows."""

    @property
    def has_workers(self: _Blocking) -> bool:
        """Whether the store keeps the workers' rows (:meth:`workers`)."""
        return self.client.has_workers

    @property
    def has_queries(self: _Blocking) -> bool:
        """Whether the store answers counts, groupings and activity (:meth:`activity`)."""
        return self.client.has_queries

    def workers(self: _Blocking, *, gone_within: float | timedelta = 0.0) -> list[WorkerRecord]:
        """The live workers, and those gone within ``gone_within``; see
        :meth:`DurableClient.workers`."""
        return self.call(self.client.workers, gone_within=gone_within)

    def unserved(self: _Blocking) -> list[Unserved]:
        """The pending workflows, by queue and name, that no live worker serves."""
        return self.call(self.client.unserved)

    def count_workflows(
        self: _Blocking, where: WorkflowFilter, *, statuses: Sequence[WorkflowStatus] | None = None
    ) -> int:
        """How many workflows ``where`` covers (of ``statuses`` only, when given)."""
        return self.call(self.client.count_workflows, where, statuses=statuses)

    def error_counts(
        self: _Blocking, where: WorkflowFilter, *, limit: int = 50
    ) -> list[ErrorCount]:
        """The workflows ``where`` covers that recorded an error, by name and error type."""
        return self.call(self.client.error_counts, where, limit=limit)

    def retry_workflows(self: _Blocking, where: WorkflowFilter, *, limit: int | None = None) -> int:
        """Retry every failed or cancelled workflow ``where`` covers (at most ``limit``);
        how many were."""
        return self.call(self.client.retry_workflows, where, limit=limit)

    def cancel_workflows(
        self: _Blocking, where: WorkflowFilter, *, limit: int | None = None
    ) -> int:
        """Cancel every unfinished workflow ``where`` covers (at most ``limit``); how many
        were."""
        return self.call(self.client.cancel_workflows, where, limit=limit)

    def activity(self: _Blocking, window: float | timedelta) -> list[Activity]:
        """Per queue, what was created, started and ended over the last ``window``."""
        return self.call(self.client.activity, window)

    def steps_page(
        self: _Blocking, workflow_id: str, *, first: int, limit: int
    ) -> list[StepRecord]:
        """The steps of a workflow from index ``first`` on, at most ``limit``."""
        return self.call(self.client.steps_page, workflow_id, first=first, limit=limit)

    def why_pending(self: _Blocking, record: WorkflowRecord) -> str | None:
        """Why ``record`` is still pending, when no live worker serves it; else ``None``."""
        return self.call(self.client.why_pending, record)
