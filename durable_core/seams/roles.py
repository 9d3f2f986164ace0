"""The store's roles: one small protocol per job a store does for the engine.

:class:`~durable_core.seams.store.Store` is their union, what a full backend (every SQL
store) implements. A plugin or a fake implements the roles it serves, and each piece of
the engine asks for the roles it uses: a caller's client needs a :class:`CallerStore`
(and an :class:`AdminStore` or a :class:`ScheduleStore` for those calls), a worker
needs every role but :class:`AdminStore` and refuses at boot, with
:class:`~durable_core.errors.RoleNotSupportedError`, a store that lacks one
(:func:`require_roles`). The contract suite has a class per role
(:mod:`durable_core.contract`).

Every write made on behalf of a running workflow carries the
:class:`~durable_core.seams.records.Lease` it was claimed under and must fail with
:class:`~durable_core.errors.LeaseLostError` when that lease is no longer the current one
(fencing). Times are given as durations so that each store can use its own clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..definitions.schedules import ScheduleRecord
from ..errors import RoleNotSupportedError
from .records import (
    AttemptRecord,
    BacklogRecord,
    BodyCall,
    ClaimedWorkflow,
    Lease,
    NewWorkflow,
    Settlement,
    StepRecord,
    StepTryRecord,
    Wait,
    WorkflowRecord,
    WorkflowStatus,
)

__all__ = [
    "ROLES",
    "RUNNER_ROLES",
    "AdminStore",
    "AttemptStore",
    "CallerStore",
    "Lifecycle",
    "RunStore",
    "ScheduleStore",
    "admin_of",
    "describe",
    "lacking",
    "require_roles",
    "schedules_of",
]


@runtime_checkable
class Lifecycle(Protocol):
    """Opening and closing a store, and its schema."""

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


@runtime_checkable
class CallerStore(Protocol):
    """What a caller needs: enqueue workflows, read them (rows, steps, tries, attempts),
    send them messages and read the events they publish."""

    async def enqueue(self, workflows: Sequence[NewWorkflow]) -> Sequence[str]:
        """Insert pending workflows in one transaction; return the ids written.

        An id that exists already is skipped when the row repeats the same workflow
        and input; otherwise :class:`~durable_core.errors.WorkflowConflictError` is
        raised and nothing is written. A caller's start: a running body's is fenced
        (:meth:`AttemptStore.enqueue_from`).
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

    async def load_attempts(self, workflow_id: str) -> list[AttemptRecord]:
        """Every ended attempt of a workflow, oldest first (``settle`` records each attempt
        it ends, ``record_attempt`` the others)."""
        ...

    async def send(self, workflow_id: str, topic: str, payload: str, message_id: str) -> None:
        """Add a message to a workflow's inbox and wake it if it waits on ``topic``.

        A repeated ``message_id`` is a no-op; an unknown workflow raises
        :class:`~durable_core.errors.WorkflowNotFoundError`. A caller's send: a running
        body's is fenced (:meth:`AttemptStore.send_from`).
        """
        ...

    async def get_event(self, workflow_id: str, key: str) -> str | None:
        """The value a workflow published under ``key``, or ``None``."""
        ...


@runtime_checkable
class AttemptStore(Protocol):
    """The attempt's writes: what a running workflow writes its steps, waits, effects and
    settlement through (the store itself, or a
    :class:`~durable_core.runtime.group_commit.GroupCommit` over it). Every write is fenced
    by ``lease`` (an effect's by its :class:`~durable_core.seams.records.BodyCall`'s) in
    the transaction that writes it, and raises :class:`~durable_core.errors.LeaseLostError`
    when refused, having written nothing."""

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
        transaction (:meth:`CallerStore.load_step_tries`)."""
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

    async def set_event(
        self, lease: Lease, key: str, value: str, *, call: BodyCall | None = None
    ) -> None:
        """Publish ``value`` under ``key`` for the workflow holding ``lease``; with ``call``
        (the body's call, under the same lease), record it in the same transaction."""
        ...

    async def send_from(
        self, call: BodyCall, workflow_id: str, topic: str, payload: str, message_id: str
    ) -> None:
        """:meth:`CallerStore.send` from a running body: in one transaction, only while
        ``call.lease`` holds the sender, with ``call`` recorded (else
        :class:`~durable_core.errors.LeaseLostError`, nothing written)."""
        ...

    async def enqueue_from(self, call: BodyCall, workflows: Sequence[NewWorkflow]) -> Sequence[str]:
        """:meth:`CallerStore.enqueue` from a running body (its children): in one
        transaction, only while ``call.lease`` holds the starter, with ``call`` recorded
        (else :class:`~durable_core.errors.LeaseLostError`, nothing written); the ids
        written."""
        ...


@runtime_checkable
class RunStore(Protocol):
    """Running one given workflow: take its lease (a woken or due workflow, in-process), keep
    it, and record an attempt that ended without settling."""

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

    async def record_attempt(
        self, lease: Lease, outcome: str, error: str | None, ended_at: datetime | None = None
    ) -> None:
        """Record how the attempt of ``lease`` ended when it did not settle itself (it was
        cancelled, timed out, or crashed; ``ended_at`` defaults to now). Not fenced."""
        ...


@runtime_checkable
class AdminStore(Protocol):
    """An operator's writes on workflows: the backlog, retry, cancel, fork."""

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


@runtime_checkable
class ScheduleStore(Protocol):
    """Schedules (schema version 4): saved by callers and workers, fired by workers."""

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


ROLES: tuple[type, ...] = (
    Lifecycle,
    CallerStore,
    AttemptStore,
    RunStore,
    AdminStore,
    ScheduleStore,
)
"""Every role, in the order a refusal names the first one missing: the union is
:class:`~durable_core.seams.store.Store`, what a worker needs (with a claimer)."""

RUNNER_ROLES: tuple[type, ...] = (CallerStore, AttemptStore, RunStore, AdminStore)
"""What running workflows in-process needs (:class:`~durable_core.testing.WorkflowRunner`):
reading them, their attempts' writes, taking a given one, cancelling one whose timeout
passed."""


def _members(role: type) -> dict[str, bool]:
    """The members a role declares (its own and its bases'), each with whether it is a
    method (else an attribute, such as ``description``)."""
    members: dict[str, bool] = {}
    for cls in reversed(role.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        for name, value in vars(cls).items():
            if not name.startswith("_"):
                members[name] = callable(value)
    return members


def lacking(store: object, role: type) -> list[str]:
    """The members of ``role`` that ``store`` lacks (a method that is not callable counts
    as lacking); empty when it plays the role."""
    return [
        name
        for name, method in _members(role).items()
        if not (callable(getattr(store, name, None)) if method else hasattr(store, name))
    ]


def describe(store: object) -> str:
    """The store's ``description`` (:class:`Lifecycle`), else its class name."""
    description = getattr(store, "description", None)
    return description if isinstance(description, str) else type(store).__name__


def _refusal(store: object, role: type, missing: list[str], needed_by: str) -> str:
    description = describe(store)
    lacks = ", ".join(f"{name}()" if callable(getattr(role, name)) else name for name in missing)
    role_name = role.__name__
    return (
        f"{description} does not play the {role_name} role (it lacks {lacks}): {needed_by} needs it"
    )


def require_roles(store: object, roles: Sequence[type], *, needed_by: str) -> None:
    """Raise :class:`~durable_core.errors.RoleNotSupportedError`, naming the first role of
    ``roles`` that ``store`` does not play and what it lacks, unless it plays them all."""
    for role in roles:
        missing = lacking(store, role)
        if missing:
            raise RoleNotSupportedError(_refusal(store, role, missing, needed_by))


def admin_of(store: Any, needed_by: str = "this call") -> AdminStore:
    """``store`` as an :class:`AdminStore`, or a
    :class:`~durable_core.errors.RoleNotSupportedError`."""
    require_roles(store, [AdminStore], needed_by=needed_by)
    return store  # type: ignore[no-any-return]


def schedules_of(store: Any, needed_by: str = "this call") -> ScheduleStore:
    """``store`` as a :class:`ScheduleStore`, or a
    :class:`~durable_core.errors.RoleNotSupportedError`."""
    require_roles(store, [ScheduleStore], needed_by=needed_by)
    return store  # type: ignore[no-any-return]
