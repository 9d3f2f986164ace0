"""Listing, reading, retrying and forking workflows, and the store's counts.

:class:`AdminMethods` gives :class:`~durable_core.caller.client.DurableClient` its
administration methods.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .. import durations
from ..definitions.queues import Queue, queue_name
from ..definitions.retention import SETTLED, parse_age
from ..errors import ConfigurationError, RoleNotSupportedError, StatsNotSupportedError
from ..runtime.context import body_effect
from ..runtime.retention import prune
from ..seams.attributes import AttributeFilter, Attributes, attributes_of, check_filters
from ..seams.plugins import observers
from ..seams.records import (
    FOREVER,
    BacklogRecord,
    EndedAttempts,
    NewWorkflow,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.retention import PruneFilter, Pruning
from ..seams.roles import CallerStore, admin_of, describe
from ..seams.store import Erasure, WorkflowStats
from .handle import WorkflowHandle
from .ids import new_workflow_id


class AdminMethods:
    """The administration methods of :class:`~durable_core.caller.client.DurableClient`."""

    store: CallerStore

    handle: Callable[[str], WorkflowHandle[Any]]
    """A handle to an existing workflow (the client's own)."""

    async def list_workflows(
        self,
        *,
        status: WorkflowStatus | str | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: Queue | str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
        attributes: Mapping[str, AttributeFilter] | None = None,
    ) -> list[WorkflowRecord]:
        """The newest workflows first, optionally only those with ``status`` (a
        :class:`WorkflowStatus` or its value), the workflow name ``name``, in ``queue``,
        of the parent ``parent_id``, whose recorded error is of type ``error_type``
        (``builtins.ConnectionError``), created at or after ``created_after`` and before
        ``created_before`` (aware datetimes), whose searchable ``attributes`` match
        (``{"customer": "acme", "amount": AttributeRange(10, 100)}``: each equal, or a
        number in the range; found through their index). Pages: pass the id of a page's
        last workflow as ``before`` to get the next page."""
        if isinstance(status, str) and not isinstance(status, WorkflowStatus):
            try:
                status = WorkflowStatus(status)
            except ValueError:
                choices = ", ".join(s.value for s in WorkflowStatus)
                raise ConfigurationError(f"unknown status {status!r}; one of {choices}") from None
        if limit < 1:
            raise ConfigurationError(f"limit must be at least 1, got {limit}")
        for what, moment in (("created_after", created_after), ("created_before", created_before)):
            if moment is not None and moment.tzinfo is None:
                raise ConfigurationError(f"{what} must be an aware datetime, got {moment!r}")
        if attributes:
            return await attributes_of(self.store).list_by_attributes(
                check_filters(attributes),
                status=status,
                name=name,
                limit=limit,
                queue=None if queue is None else queue_name(queue),
                parent_id=parent_id,
                created_after=created_after,
                created_before=created_before,
                before=before,
                error_type=error_type or None,
            )
        return await self.store.list_workflows(
            status=status,
            name=name,
            limit=limit,
            queue=None if queue is None else queue_name(queue),
            parent_id=parent_id,
            created_after=created_after,
            created_before=created_before,
            before=before,
            error_type=error_type or None,
        )

    def _stats(self) -> WorkflowStats:
        if not isinstance(self.store, WorkflowStats):
            raise StatsNotSupportedError(
                f"{describe(self.store)} does not count the attempts that end"
            )
        return self.store

    @property
    def has_stats(self) -> bool:
        """Whether the store counts ended attempts (:meth:`count_ended_attempts`)."""
        return isinstance(self.store, WorkflowStats)

    async def count_ended_attempts(self, after: int | None = None) -> EndedAttempts:
        """The attempts that ended since the cursor ``after`` (from a previous call's
        ``cursor``; ``None`` only reads the cursor of now), by queue and outcome:
        the throughput. Raises :class:`StatsNotSupportedError` when the store cannot."""
        return await self._stats().count_ended_attempts(after)

    async def backlog(self) -> list[BacklogRecord]:
        """The unfinished workflows counted by queue, name and status: what waits to be
        claimed (a name that no worker serves stays pending here), runs, and sleeps."""
        return await admin_of(self.store, "backlog()").backlog()

    async def get(self, workflow_id: str) -> WorkflowRecord:
        """The row of workflow ``workflow_id``; :class:`WorkflowNotFoundError` if none."""
        return await self.handle(workflow_id).info()

    async def retry(self, workflow_id: str) -> None:
        """Put a failed or cancelled workflow back to pending with a fresh attempt budget;
        its succeeded steps stay cached, so it resumes where it stopped."""

        async def retry() -> str:
            await admin_of(self.store, "retry()").retry_workflow(workflow_id)
            return "null"

        await body_effect("durable.retry", [workflow_id], retry)

    async def erase(self, workflow_id: str) -> int:
        """Erase a settled workflow's payloads: its input, output and error, its steps'
        inputs, outputs and errors, the messages sent to it, its events, stream items and
        updates become tombstones, its attributes are deleted; its row, status, timings,
        history and errors' types stay, for audit. Reading an erased value (a caller's
        ``output()``, a retried body's replay) raises
        :class:`~durable_core.errors.ErasedValueError`. How many values were erased.
        Raises :class:`~durable_core.errors.InvalidStateError` while it has not settled,
        :class:`~durable_core.errors.RoleNotSupportedError` on a store that cannot."""
        if not isinstance(self.store, Erasure):
            raise RoleNotSupportedError(f"{describe(self.store)} cannot erase payloads")
        store = self.store

        async def erase() -> str:
            return json.dumps(await store.erase_workflow(workflow_id))

        return int(json.loads(await body_effect("durable.erase", [workflow_id], erase)))

    async def prune(
        self,
        older_than: float | timedelta | str,
        *,
        statuses: Iterable[WorkflowStatus | str] = SETTLED,
        names: Iterable[str] = (),
        queues: Iterable[str] = (),
        dry_run: bool = False,
        batch: int = 1000,
    ) -> dict[str, int]:
        """Remove the settled workflows that ended more than ``older_than`` ago (seconds, a
        ``timedelta`` or ``"30d"``), of ``statuses``, ``names`` and ``queues`` (empty:
        any), with every row of theirs, ``batch`` per transaction; never one that is
        unfinished, nor one whose parent or child is. The rows removed per table (with
        ``dry_run``: counted, nothing removed). As ``durable prune``; the fleet applies
        :class:`~durable_core.definitions.retention.Retention` policies itself."""
        if not isinstance(self.store, Pruning):
            raise RoleNotSupportedError(f"{describe(self.store)} cannot prune workflows")
        age = parse_age(older_than, "older_than")
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise ConfigurationError(f"batch takes 1 to 10000 workflows, got {batch!r}")
        try:
            chosen = tuple(WorkflowStatus(s) for s in statuses)
            which = PruneFilter(
                durations.utcnow() - timedelta(seconds=age), chosen, tuple(names), tuple(queues)
            )
        except ValueError:
            raise ConfigurationError(
                f"statuses are some of {', '.join(SETTLED)}, got {list(statuses)!r}"
            ) from None
        if dry_run:
            return await self.store.count_prunable(which)
        return dict(await prune(self.store, which, batch=batch) or {})

    async def fork(self, workflow_id: str, *, from_step: int) -> WorkflowHandle[Any]:
        """Start a new workflow (a new id) with the name, input, attempt budget and timeout
        of ``workflow_id``, whose step cache holds copies of its succeeded steps before
        index ``from_step``: it replays those and runs again from step ``from_step``.
        It starts with the original's searchable attributes (those its replayed calls set
        among them). The original is left as it is."""
        if isinstance(from_step, bool) or not isinstance(from_step, int) or from_step < 0:
            raise ConfigurationError(f"from_step is a step index (0 or more), got {from_step!r}")
        source = await self.get(workflow_id)
        timeout = None
        if source.deadline is not None and source.deadline < FOREVER:
            timeout = (source.deadline - source.created_at).total_seconds()
            timeout = min(timeout, durations.MAX_SECONDS)
        row = NewWorkflow(
            id=new_workflow_id(),
            name=source.name,
            input=source.input,
            max_attempts=source.max_attempts,
            timeout_seconds=timeout,
            queue=source.queue,
            priority=source.priority,
            concurrency_key=source.concurrency_key,
            headers=source.headers,
            attributes=(
                await self.store.get_attributes(workflow_id)
                if isinstance(self.store, Attributes)
                else None
            )
            or None,
        )

        async def fork() -> str:
            await admin_of(self.store, "fork()").fork_workflow(row, workflow_id, from_step)
            observers().durable_workflow_enqueued(
                workflow_id=row.id, workflow_name=row.name, max_attempts=row.max_attempts
            )
            return json.dumps(row.id)

        forked = json.loads(await body_effect("durable.fork", [workflow_id, from_step], fork))
        return WorkflowHandle(self.store, forked, row.name)
