"""The seams between the engine and persistence: the ``Store`` and ``Claimer`` protocols.

A store persists workflows and their steps. :class:`Store` is the union of the store's
roles (:mod:`durable_core.seams.roles`: lifecycle, caller, attempt, run, admin,
schedules), what every SQL store implements; a plugin or a fake may implement only the
roles it serves. Every write made on behalf of a running workflow carries the
:class:`~durable_core.seams.records.Lease` it was claimed under and must fail with
:class:`~durable_core.errors.LeaseLostError` when that lease is no longer the current one
(fencing). Times are given as durations so that each store can use its own clock
(PostgreSQL uses the server's ``now()``).

A claimer hands out work to workers. Only PostgreSQL offers one; a store that
cannot claim simply does not have the :class:`Claimer` methods, and the worker
refuses it with :class:`~durable_core.errors.ClaimNotSupportedError` at boot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

from ..definitions.queues import Route
from .compensation_role import Compensations
from .flow_roles import Debouncer
from .operators import Activity, ErrorCount, WorkerRecord, WorkflowFilter
from .records import (
    ClaimedWorkflow,
    EndedAttempts,
    Settlement,
    StepRecord,
    StepWrite,
    WorkflowStatus,
)
from .roles import (
    AdminStore,
    AttemptStore,
    CallerStore,
    Lifecycle,
    RunStore,
    ScheduleStore,
)
from .schedule_roles import ScheduleOverlaps
from .talk_roles import Streams, Updates, Watch

__all__ = [
    "AdminStore",
    "AttemptStore",
    "BatchWriter",
    "CallerStore",
    "CancelFeed",
    "Claimer",
    "Compensations",
    "Debouncer",
    "EmbeddedDatabase",
    "Erasure",
    "Lifecycle",
    "OperatorQueries",
    "RunStore",
    "ScheduleFeed",
    "ScheduleOverlaps",
    "ScheduleStore",
    "Store",
    "Streams",
    "Updates",
    "Watch",
    "WorkerLiveness",
    "WorkerRegistry",
    "WorkflowStats",
]


@runtime_checkable
class Store(Lifecycle, CallerStore, AttemptStore, RunStore, AdminStore, ScheduleStore, Protocol):
    """Persistence for workflows and steps: every role of :mod:`durable_core.seams.roles`."""


@runtime_checkable
class Claimer(Protocol):
    """Hands runnable workflows to workers."""

    async def claim(
        self, *, worker_id: str, limit: int, lease_seconds: float, routes: Sequence[Route]
    ) -> list[ClaimedWorkflow]:
        """Lease up to ``limit`` runnable workflows at once, only from ``routes``.

        Runnable means pending and due, waiting past its deadline, or running with
        an expired lease; each claimed row has ``attempts`` incremented. A row is
        taken only through a route naming its queue and its workflow name, at most
        ``route.take`` from each route, within its queue's fleet limits (concurrency,
        rate, concurrency key), the highest priority first.
        """
        ...

    async def wait_for_work(self, timeout: float) -> None:
        """Return when new work may be available, or after ``timeout`` seconds."""
        ...


@runtime_checkable
class BatchWriter(Protocol):
    """A store that commits the writes of many attempts together (group commit)."""

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        """Write every step row and settlement in one transaction, each fenced by its own
        lease; whether each landed (``False``: its lease was lost, and it wrote nothing),
        in the order given. A settlement's ``step`` is written with it, if it lands. A
        settlement here wakes no parent (settle those alone).

        At most one write per step row and one settlement per workflow in a batch.
        """
        ...


@runtime_checkable
class WorkflowStats(Protocol):
    """A store that counts the attempts that end (the throughput) cheaply, for monitoring."""

    async def count_ended_attempts(self, after: int | None) -> EndedAttempts:
        """The attempts that ended since the cursor ``after`` (``None``: only find the
        cursor of now), by queue and outcome."""
        ...


@runtime_checkable
class CancelFeed(Protocol):
    """A claimer that hears cancels as they happen, so a worker stops a cancelled body at once
    (without it, the worker finds out at the body's next write or lease renewal)."""

    def on_cancel(self, handler: Callable[[str], None]) -> bool:
        """Call ``handler(workflow_id)`` whenever a workflow is cancelled; False if this
        instance cannot (then nothing is called)."""
        ...


@runtime_checkable
class ScheduleFeed(Protocol):
    """A store that hears schedules change as it happens, so a worker's scheduler sleeps
    until the next tick instead of polling for schedules added meanwhile."""

    def on_schedule_change(self, handler: Callable[[], None]) -> bool:
        """Call ``handler()`` whenever any process adds, changes, pauses or resumes a schedule,
        and whenever such news may have gone unheard (the feed was re-established); False if
        this instance cannot (then nothing is called)."""
        ...


@runtime_checkable
class EmbeddedDatabase(Protocol):
    """A database server the library can start itself, for use without any set-up."""

    async def start(self) -> str:
        """Start (or attach to) the server; return a database URL for it."""
        ...

    async def stop(self) -> None:
        """Stop the server if this process started it."""
        ...


@runtime_checkable
class WorkerRegistry(Protocol):
    """A store where each worker keeps a row while it lives (schema version 6), so that
    operators see who works and which pending work nobody serves."""

    async def beat_worker(self, worker: WorkerRecord, ttl_seconds: float) -> None:
        """Write ``worker``'s row (insert or replace), live until ``ttl_seconds`` from now."""
        ...

    async def leave_worker(self, worker_id: str) -> None:
        """Mark the worker gone now (a clean stop)."""
        ...

    async def list_workers(self, *, gone_within_seconds: float = 0.0) -> list[WorkerRecord]:
        """The live workers, and those gone within the last ``gone_within_seconds``, by id."""
        ...


@runtime_checkable
class WorkerLiveness(Protocol):
    """A claimer that ties each worker's liveness to a database session of its own, so that
    the workflows of a worker whose session ended (killed, its host lost) are taken over
    within a poll interval instead of when their leases run out. A worker on a store
    without it, or whose :attr:`offers_liveness` is false, leaves them to lease expiry."""

    @property
    def offers_liveness(self) -> bool:
        """Whether this store can hold liveness sessions (a direct connection can; a
        transaction-mode pooler cannot)."""
        ...

    async def hold_liveness(
        self, worker_id: str, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED
    ) -> None:
        """Hold ``worker_id``'s liveness on a session of its own until cancelled, taking it
        again when the session is lost; the worker's registry row names it from its next
        beat (:meth:`WorkerRegistry.beat_worker`). Started once the first try has ended."""
        ...

    async def end_dead_leases(self) -> dict[str, int]:
        """Mark gone each worker whose liveness session has ended and end now the leases it
        held, so the next claim takes its workflows over (with one more attempt, their late
        writes fenced): how many leases each had, by worker id."""
        ...


@runtime_checkable
class Erasure(Protocol):
    """A store that erases a settled workflow's payloads, keeping its row and history
    (``durable erase``; see :mod:`durable_core.sql.erasure` for what is replaced)."""

    async def erase_workflow(self, workflow_id: str) -> int:
        """Replace the settled workflow's payloads with tombstones and delete its
        attributes; how many values were erased."""
        ...


@runtime_checkable
class OperatorQueries(Protocol):
    """A store that answers an operator's questions about many workflows at once: counts,
    failures grouped by error type, bulk retries, activity over a window, steps by page."""

    async def count_workflows(
        self, where: WorkflowFilter, *, statuses: Sequence[WorkflowStatus] | None = None
    ) -> int:
        """How many workflows ``where`` covers (of ``statuses`` only, when given)."""
        ...

    async def workflow_ids(
        self,
        where: WorkflowFilter,
        *,
        statuses: Sequence[WorkflowStatus] | None = None,
        after: str = "",
        limit: int = 500,
    ) -> list[str]:
        """The ids ``where`` covers (of ``statuses`` only), in id order after ``after``."""
        ...

    async def retry_workflows(
        self, where: WorkflowFilter, *, after: str = "", limit: int = 500
    ) -> list[str]:
        """Retry the next ``limit`` failed or cancelled workflows ``where`` covers, in id order
        after ``after``, in one transaction; the ids retried."""
        ...

    async def error_counts(self, where: WorkflowFilter, *, limit: int = 50) -> list[ErrorCount]:
        """The workflows ``where`` covers that recorded an error, counted by name and error
        type, the most frequent first."""
        ...

    async def activity(self, window_seconds: float) -> list[Activity]:
        """Per queue, over the last ``window_seconds``: workflows created, how soon they
        started, and workflows ended, by outcome."""
        ...

    async def load_steps_page(
        self, workflow_id: str, *, first: int, limit: int
    ) -> list[StepRecord]:
        """The steps of a workflow from index ``first`` on, at most ``limit``, by index."""
        ...
