"""What an on-call operator asks of :class:`~durable_core.caller.client.DurableClient`.

:class:`OnCallMethods` gives the client its methods over many workflows at
once (counts and failures by error type, bulk retry and cancel by filter,
activity over a window, steps by page) and over the workers (who is live,
which pending work no live worker serves). They need a store with
:class:`~durable_core.seams.store.OperatorQueries` or
:class:`~durable_core.seams.store.WorkerRegistry` (every SQL store has both); another
store raises :class:`~durable_core.errors.StatsNotSupportedError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import timedelta

import anyio

from .. import durations
from ..errors import ConfigurationError, InvalidStateError, StatsNotSupportedError
from ..seams.operators import Activity, ErrorCount, Unserved, WorkerRecord, WorkflowFilter, unserved
from ..seams.records import BacklogRecord, StepRecord, WorkflowRecord, WorkflowStatus
from ..seams.roles import CallerStore, admin_of, describe
from ..seams.store import OperatorQueries, WorkerRegistry

BULK_PAGE = 500
"""How many workflows a bulk action takes per transaction."""
RETRYABLE = (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)
CANCELLABLE = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.WAITING)


class OnCallMethods:
    """The on-call methods of :class:`~durable_core.caller.client.DurableClient`."""

    store: CallerStore

    def _queries(self) -> OperatorQueries:
        if not isinstance(self.store, OperatorQueries):
            raise StatsNotSupportedError(
                f"{describe(self.store)} cannot count or group workflows by filter"
            )
        return self.store

    def _registry(self) -> WorkerRegistry:
        if not isinstance(self.store, WorkerRegistry):
            raise StatsNotSupportedError(f"{describe(self.store)} keeps no worker registry")
        return self.store

    @property
    def has_workers(self) -> bool:
        """Whether the store keeps the workers' rows (:meth:`workers`)."""
        return isinstance(self.store, WorkerRegistry)

    @property
    def has_queries(self) -> bool:
        """Whether the store answers counts, groupings and activity (:meth:`activity`)."""
        return isinstance(self.store, OperatorQueries)

    async def workers(self, *, gone_within: float | timedelta = 0.0) -> list[WorkerRecord]:
        """The live workers (with what they serve and run), and those gone within the last
        ``gone_within`` (``live`` False), by id."""
        seconds = durations.seconds(gone_within, "workers gone_within")
        return await self._registry().list_workers(gone_within_seconds=seconds)

    async def unserved(self) -> list[Unserved]:
        """The pending workflows, by queue and name, that no live worker serves."""
        workers = await self.workers()
        return unserved(await admin_of(self.store, "unserved()").backlog(), workers)

    async def count_workflows(
        self, where: WorkflowFilter, *, statuses: Sequence[WorkflowStatus] | None = None
    ) -> int:
        """How many workflows ``where`` covers (of ``statuses`` only, when given)."""
        return await self._queries().count_workflows(where, statuses=statuses)

    async def error_counts(self, where: WorkflowFilter, *, limit: int = 50) -> list[ErrorCount]:
        """The workflows ``where`` covers that recorded an error (failed, or retrying after
        a failed attempt), counted by workflow name and error type, most frequent first."""
        return await self._queries().error_counts(where, limit=limit)

    async def retry_workflows(self, where: WorkflowFilter, *, limit: int | None = None) -> int:
        """Retry every failed or cancelled workflow ``where`` covers (each as :meth:`retry`
        does, a page at a time), or the first ``limit`` of them in id order; how many were
        retried. Each is retried at most once, even if it fails again meanwhile."""
        left = _check_limit(limit)
        queries, after, retried = self._queries(), "", 0
        while left is None or left > 0:
            page = BULK_PAGE if left is None else min(BULK_PAGE, left)
            ids = await queries.retry_workflows(where, after=after, limit=page)
            if not ids:
                break
            retried += len(ids)
            left = None if left is None else left - len(ids)
            after = ids[-1]
        return retried

    async def cancel_workflows(self, where: WorkflowFilter, *, limit: int | None = None) -> int:
        """Cancel every pending, running or waiting workflow ``where`` covers, with its
        unfinished children (each as :meth:`cancel` does), or the first ``limit`` of them in
        id order; how many were cancelled."""
        left = _check_limit(limit)
        queries, after, cancelled = self._queries(), "", 0
        while left is None or left > 0:
            page = BULK_PAGE if left is None else min(BULK_PAGE, left)
            ids = await queries.workflow_ids(where, statuses=CANCELLABLE, after=after, limit=page)
            if not ids:
                break
            for workflow_id in ids:
                with contextlib.suppress(InvalidStateError):  # it ended meanwhile
                    await admin_of(self.store, "cancel_workflows()").cancel_workflow(workflow_id)
                    cancelled += 1
            left = None if left is None else left - len(ids)
            after = ids[-1]
        return cancelled

    async def activity(self, window: float | timedelta) -> list[Activity]:
        """Per queue, over the last ``window`` (by the database's clock): the workflows
        created and how soon they first started, and those that ended, by outcome."""
        seconds = durations.seconds(window, "activity window", allow_zero=False)
        return await self._queries().activity(seconds)

    async def steps_page(self, workflow_id: str, *, first: int, limit: int) -> list[StepRecord]:
        """The steps of a workflow from index ``first`` on, at most ``limit``, by index."""
        if isinstance(self.store, OperatorQueries):
            return await self.store.load_steps_page(workflow_id, first=first, limit=limit)
        steps = await self.store.load_steps(workflow_id)
        return [s for s in steps if s.step_index >= first][:limit]

    async def why_pending(self, record: WorkflowRecord) -> str | None:
        """``no live worker serves NAME (queue Q)`` when ``record`` is pending and no live
        worker claims it; ``None`` otherwise (see :func:`why_pending`)."""
        return await why_pending(self.store, record)


def _check_limit(limit: int | None) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigurationError(f"a bulk action's limit is 1 or more, got {limit!r}")
    return limit


async def why_pending(store: CallerStore, record: WorkflowRecord | str) -> str | None:
    """``no live worker serves NAME (queue Q)`` when the workflow ``record`` (or of that id)
    is pending and no live worker claims it; ``None`` otherwise, when the store keeps no
    registry, or when the answer takes over a second (it is a hint)."""
    if not isinstance(store, WorkerRegistry):
        return None
    with anyio.move_on_after(1.0):
        if isinstance(record, str):
            found = await store.get_workflow(record)
            if found is None:
                return None
            record = found
        if record.status is not WorkflowStatus.PENDING:
            return None
        pending = BacklogRecord(record.queue, record.name, record.status, 1, record.run_at)
        missing = unserved([pending], await store.list_workers())
        return missing[0].message if missing else None
    return None
