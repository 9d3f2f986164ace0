"""The seams between the engine and persistence: the ``Store`` and ``Claimer`` protocols.

A store persists workflows and their steps. Every write made on behalf of a
running workflow carries the :class:`~durable_core.seams.records.Lease` it was
claimed under and must fail with :class:`~durable_core.errors.LeaseLostError`
when that lease is no longer the current one (fencing). Times are given as
durations so that each store can use its own clock (PostgreSQL uses the
server's ``now()``).

A claimer hands out work to workers. Only PostgreSQL offers one; a store that
cannot claim simply does not have the :class:`Claimer` methods, and the worker
refuses it with :class:`~durable_core.errors.ClaimNotSupportedError` at boot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..definitions.queues import Route
from ..definitions.schedules import ScheduleRecord
from .compensation_role import Compensations
from .flow_roles import Debouncer
from .operators import Activity, ErrorCount, WorkerRecord, WorkflowFilter
from .records import (
    AttemptRecord,
    BacklogRecord,
    ClaimedWorkflow,
    EndedAttempts,
    Lease,
    NewWorkflow,
    Settlement,
    StepRecord,
    StepTryRecord,
    StepWrite,
    Wait,
    WorkflowRecord,
    WorkflowStatus,
)
from .schedule_roles import ScheduleOverlaps
from .talk_roles import Streams, Updates, Watch

__all__ = [
    "BatchWriter",
    "CancelFeed",
    "Claimer",
    "Compensations",
    "Debouncer",
    "EmbeddedDatabase",
    "OperatorQueries",
    "ScheduleFeed",
    "ScheduleOverlaps",
    "StepWriter",
    "Store",
    "Streams",
    "Updates",
    "Watch",
    "WorkerRegistry",
    "WorkflowStats",
]


@runtime_checkable
class StepWriter(Protocol):
    """What an attempt writes its steps and its settlement through: the store itself, or a
    :class:`~durable_core.runtime.group_commit.GroupCommit` over it. Every write is fenced by
    ``lease`` and raises :class:`~durable_core.errors.LeaseLostError` when refused."""

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        """Record that a step is running with this input (insert, or reset a failed/running row).

        ``path`` is where a concurrent body called it (``None``: ``str(step_index)``); every
        write of a step row records it."""
        ...

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        """Record a step's output and mark it succeeded."""
        ...

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        """Record a step's error and mark it failed; the failed try is kept too, in the same
        transaction (:meth:`Store.load_step_tries`)."""
        ...

    async def record_step(
        self,
        lease: Lease,
        step_index: int,
        step_name: str,
        input: str,
        output: str,
        *,
        path: str | None = None,
    ) -> None:
        """Record a succeeded step in one write (a durable primitive's result)."""
        ...

    async def settle(self, settlement: Settlement) -> None:
        """End the current attempt of ``settlement.lease`` and release the lease.

        ``settlement.status`` is ``succeeded`` (with ``output``), ``failed`` (with
        ``error``) or ``pending`` (a retry, due ``retry_delay_seconds`` from now, with
        ``error``). A final status wakes the parent ``parent_id`` if it waits on this
        workflow. The attempt's history row is written in the same transaction.
        """
        ...

    async def suspend(self, lease: Lease, waits: Sequence[Wait]) -> bool:
        """Release the lease and leave the workflow ``waiting`` until the first of ``waits``
        (at least one) ends; record each wait's step as waiting with its ``step_output``.
        Does not count an attempt.

        The row's ``run_at`` is the soonest deadline among the waits (``records.FOREVER`` when
        none has one) and its ``waiting_for`` is
        :func:`~durable_core.seams.records.waiting_for_all`.
        Returns ``False`` and changes nothing when any wait is already over (a message on
        one of the topics is there, one of the children has settled), checked under the
        workflow's row lock so that no wake-up is lost.
        """
        ...

    async def receive(
        self,
        lease: Lease,
        topic: str,
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> str | None:
        """Take the oldest message on ``topic`` and record it as the step's output, in one
        transaction; ``None`` when there is none."""
        ...

    async def set_event(self, lease: Lease, key: str, value: str) -> None:
        """Publish ``value`` under ``key`` for the workflow holding ``lease``."""
        ...


@runtime_checkable
class Store(StepWriter, Protocol):
    """Persistence for workflows and steps."""

    @property
    def description(self) -> str:
        """A human-readable name for the store, with no credentials in it."""
        ...

    async def open(self) -> None:
        """Connect. Called once before any other operation."""
        ...

    async def close(self) -> None:
        """Release every connection."""
        ...

    async def apply_schema(self) -> None:
        """Create the durable tables, or upgrade them in place to the current version.

        Idempotent, and safe to run from several processes at once.
        """
        ...

    async def check_schema(self) -> None:
        """Raise :class:`~durable_core.errors.SchemaMissingError` or
        :class:`~durable_core.errors.SchemaOutdatedError` unless the schema is current."""
        ...

    # -- enqueue and read side ------------------------------------------------

    async def enqueue(self, workflows: Sequence[NewWorkflow]) -> Sequence[str]:
        """Insert pending workflows in one transaction; return the ids written.

        An id that exists already is skipped when the row repeats the same workflow
        and input; otherwise :class:`~durable_core.errors.WorkflowConflictError` is
        raised and nothing is written.
        """
        ...

    async def get_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """Read one workflow row, or ``None`` when no such id exists."""
        ...

    async def list_workflows(
        self,
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
    ) -> list[WorkflowRecord]:
        """The newest workflows first (by ``created_at``, then id), optionally filtered:
        ``queue`` lists a queue's workflows, ``parent_id`` a workflow's children,
        ``error_type`` those whose recorded error is of that type (``builtins.KeyError``),
        ``created_after`` (inclusive) and ``created_before`` (exclusive) bound the
        creation time, ``error_type`` keeps those whose recorded error is of that type
        (its dotted name, ``builtins.ValueError``). ``before`` is a page
        cursor: only workflows listed after the workflow with that id (none when no
        such id exists). Every filter but ``error_type`` is answered from an index, a page
        at a time."""
        ...

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        """Every recorded step of a workflow, ordered by index, in one query."""
        ...

    async def load_step_tries(self, workflow_id: str) -> list[StepTryRecord]:
        """Every failed try of a workflow's steps, oldest first (``fail_step`` keeps each)."""
        ...

    async def backlog(self) -> list[BacklogRecord]:
        """The unfinished workflows (pending, running, waiting) counted by queue, name and
        status, in that order."""
        ...

    async def retry_workflow(self, workflow_id: str) -> None:
        """Put a failed or cancelled workflow back to pending with a fresh attempt budget.

        Its succeeded steps stay cached, so the retry resumes where it stopped.
        """
        ...

    async def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        """Cancel an unfinished workflow and its unfinished children; a running body loses
        its lease, its running or waiting step ends ``cancelled``, and a parent waiting on
        the workflow wakes. ``reason`` (an error JSON) is recorded as its error and its
        children's, replacing an earlier attempt's; without one, each records a
        :class:`~durable_core.errors.WorkflowCancelledError` of its own
        (:func:`~durable_core.codec.failures.cancellation_record`)."""
        ...

    async def fork_workflow(self, workflow: NewWorkflow, source_id: str, before_step: int) -> None:
        """Insert the pending workflow ``workflow`` (a new id) with copies of the succeeded
        steps of workflow ``source_id`` whose index is below ``before_step`` as its step
        cache, in one transaction: it replays those and runs on from ``before_step``.
        An id that exists already raises
        :class:`~durable_core.errors.WorkflowConflictError`, writing nothing."""
        ...

    async def record_attempt(
        self, lease: Lease, outcome: str, error: str | None, ended_at: datetime | None = None
    ) -> None:
        """Record how the attempt of ``lease`` ended when it did not settle itself (it was
        cancelled, timed out, or crashed; ``ended_at`` defaults to now). Not fenced."""
        ...

    async def load_attempts(self, workflow_id: str) -> list[AttemptRecord]:
        """Every ended attempt of a workflow, oldest first (``settle`` records each attempt
        it ends, ``record_attempt`` the others)."""
        ...

    async def send(self, workflow_id: str, topic: str, payload: str, message_id: str) -> None:
        """Add a message to a workflow's inbox and wake it if it waits on ``topic``.

        A repeated ``message_id`` is a no-op; an unknown workflow raises
        :class:`~durable_core.errors.WorkflowNotFoundError`.
        """
        ...

    async def get_event(self, workflow_id: str, key: str) -> str | None:
        """The value a workflow published under ``key``, or ``None``."""
        ...

    # -- execution side (every write is fenced by the lease) ------------------

    async def acquire(
        self, workflow_id: str, *, worker_id: str, lease_seconds: float, due_only: bool = True
    ) -> ClaimedWorkflow | None:
        """Take the lease on one specific runnable workflow, incrementing ``attempts``.

        Runnable means pending (and due, when ``due_only``) or running with an
        expired lease. Returns ``None`` when it is not runnable.
        """
        ...

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        """Extend the lease to ``lease_seconds`` from now."""
        ...

    # -- schedules (schema version 4) ----------------------------------------------------------

    async def add_schedule(self, schedule: ScheduleRecord) -> bool:
        """Insert ``schedule`` unless one has its name; whether it was inserted."""
        ...

    async def update_schedule(self, schedule: ScheduleRecord) -> bool:
        """Replace what the schedule of that name starts and when, its next tick included
        (not whether it is paused); whether it exists."""
        ...

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule named ``name``, or ``None``."""
        ...

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        ...

    async def set_schedule_paused(
        self, name: str, paused: bool, *, next_tick: datetime | None = None
    ) -> bool:
        """Pause or resume a schedule, moving its next tick to ``next_tick`` if given;
        whether it exists."""
        ...

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule (not the workflows it started); whether it existed."""
        ...

    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        """Unpaused schedules whose next tick is at or before ``now``, soonest first."""
        ...

    async def next_schedule_tick(self) -> datetime | None:
        """The soonest next tick of any unpaused schedule."""
        ...

    async def fire_schedule(
        self,
        name: str,
        *,
        expected: datetime,
        next_tick: datetime,
        fired: datetime | None,
        workflows: Sequence[NewWorkflow],
    ) -> bool:
        """In one transaction: if the schedule is unpaused and its next tick is still
        ``expected``, move it to ``next_tick`` (``fired``: the last tick started, if any)
        and enqueue ``workflows`` (ids that exist already are skipped). ``False``, with
        nothing written, when another worker moved it first or it is paused."""
        ...


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
