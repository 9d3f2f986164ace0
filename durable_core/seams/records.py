"""Plain data passed across the Store seam: statuses, rows and leases.

The records are frozen dataclasses, but for the three a worker builds once or more per
workflow (:class:`ClaimedWorkflow`, :class:`StepWrite`, :class:`Settlement`): a frozen
one costs five times as much to build (``object.__setattr__`` per field), about 8% of a
worker's instructions per workflow (``bench.profile_inprocess``). Nothing changes them
once built; treat them as read-only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..definitions.queues import DEFAULT_QUEUE
from ..errors import ConfigurationError


class WorkflowStatus(enum.StrEnum):
    """Where a workflow instance stands."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    """Suspended until a time, a message or a child: it holds no lease and no worker."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """True once the workflow will not run again on its own."""
        return self in _TERMINAL


_TERMINAL = frozenset({WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED})


class StepStatus(enum.StrEnum):
    """Where one step invocation stands."""

    RUNNING = "running"
    WAITING = "waiting"
    """A durable wait (sleep, receive, child) not over yet; its output holds the deadline."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    """The workflow was cancelled while this step ran."""


class WaitKind(enum.StrEnum):
    """What a waiting workflow waits for."""

    SLEEP = "sleep"
    MESSAGE = "message"
    CHILD = "child"
    RETRY = "retry"
    """A step's next try, due later than a worker should hold a slot for."""
    UPDATE = "update"
    """An update (a caller's request) of a name."""


MAX_TOPIC = 200
"""The longest message topic (it is kept in ``waiting_for``, 255 characters wide)."""

RESERVED_TOPICS = "durable."
"""The prefix of the topics durable-core keeps for itself (a cancel request owing a saga's
compensations is a message on ``durable.cancel``): no caller sends or receives on them."""


def check_storable(what: str, text: str) -> str:
    """``text`` if every backend keeps it exactly; else a
    :class:`~durable_core.errors.ConfigurationError` naming ``what``: a NUL character
    (PostgreSQL's text refuses it) or a lone surrogate (UTF-8 cannot carry it)."""
    if "\x00" in text:
        raise ConfigurationError(f"{what} holds a NUL character (\\x00), which is not stored")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigurationError(
                f"{what} holds a lone surrogate, which UTF-8 (and so the database) cannot "
                f"carry: {text[:80]!r}"
            ) from None
    return text


def check_topic(topic: str) -> str:
    """``topic``, if a caller may send or receive on it; else a
    :class:`~durable_core.errors.ConfigurationError` naming why."""
    if not isinstance(topic, str):
        raise ConfigurationError(f"a topic is a str, got {type(topic).__name__}")
    check_storable("a topic", topic)
    if len(topic) > MAX_TOPIC:
        raise ConfigurationError(f"a topic is at most {MAX_TOPIC} characters, got {len(topic)}")
    if topic.startswith(RESERVED_TOPICS):
        raise ConfigurationError(
            f"topic {topic!r} is reserved: topics starting with {RESERVED_TOPICS!r} are "
            "durable-core's own"
        )
    return topic


FOREVER = datetime(9999, 12, 31, tzinfo=UTC)
"""The ``run_at`` of a workflow waiting with no deadline."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Why and until when a workflow suspends, and the step that records it.

    ``key`` is the topic (``MESSAGE``), the child's id (``CHILD``) or the step's name
    (``RETRY``); the store
    suspends only if that wait is not already over (a message is there, the child
    has settled), checked under the workflow's row lock.
    """

    kind: WaitKind
    key: str
    deadline: datetime | None
    step_index: int
    step_name: str
    step_input: str
    step_output: str = "null"
    """What the waiting step row's output holds (the deadline, a retry's state)."""
    step_path: str | None = None
    """The waiting step's path (``None``: ``str(step_index)``)."""

    @property
    def waiting_for(self) -> str:
        """The ``waiting_for`` column: ``sleep``, ``message:<topic>``, ``child:<id>`` or
        ``retry:<step>``."""
        return self.kind.value if self.kind is WaitKind.SLEEP else f"{self.kind.value}:{self.key}"


ANY_WAIT = "any"
"""The ``waiting_for`` prefix of a workflow suspended on several waits: ``any:<n>``."""


def waiting_for_all(waits: Sequence[Wait]) -> str:
    """The ``waiting_for`` column of a workflow suspended on ``waits``: the wait's own when
    there is one, else ``any:<n>`` (whatever may end one of them wakes it)."""
    if not waits:
        raise ConfigurationError("a workflow suspends on at least one wait")
    return waits[0].waiting_for if len(waits) == 1 else f"{ANY_WAIT}:{len(waits)}"


def soonest_deadline(waits: Sequence[Wait]) -> datetime:
    """When a workflow suspended on ``waits`` wakes by itself: the soonest deadline among
    them, :data:`FOREVER` when none has one."""
    return min((w.deadline for w in waits if w.deadline is not None), default=FOREVER)


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    """A workflow instance to enqueue. ``input`` is the encoded argument JSON."""

    id: str
    name: str
    input: str
    max_attempts: int
    delay_seconds: float = 0.0
    parent_id: str | None = None
    timeout_seconds: float | None = None
    """Cancel the workflow, wherever it is, this long after it is started."""
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    """Within its queue, a higher priority is claimed first."""
    concurrency_key: str | None = None
    """What its queue's ``key_concurrency`` limit counts by (a customer id, say)."""
    headers: Mapping[str, str] | None = None
    """What the starter passes along to the worker (a trace context, say)."""
    attributes: Mapping[str, str | int | float | bool] | None = None
    """Its searchable attributes, written with the row (by an ``Attributes`` store)."""


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    """One row of the ``workflows`` table, as a store reads it."""

    id: str
    name: str
    status: WorkflowStatus
    input: str
    output: str | None
    error: str | None
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None = None
    locked_by: str | None = None
    locked_until: datetime | None = None
    parent_id: str | None = None
    waiting_for: str | None = None
    """``sleep``, ``message:<topic>``, ``child:<id>``, ``retry:<step>`` or ``any:<n>`` (several
    waits at once) while ``waiting``."""
    deadline: datetime | None = None
    """When a workflow started with a timeout is cancelled."""
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    concurrency_key: str | None = None
    started_at: datetime | None = None
    """When a worker first took it."""
    headers: Mapping[str, str] | None = None

    @property
    def wait_description(self) -> str | None:
        """What a waiting workflow waits for, and until when, in words (``None``: it does
        not wait)."""
        if not self.waiting_for:
            return None
        until = self.wake_at
        deadline = f" until {until:%Y-%m-%d %H:%M:%S} UTC" if until else ""
        kind, _, key = self.waiting_for.partition(":")
        if kind == "sleep":
            return f"its sleep to end{deadline}"
        if kind == "message":
            return f"a message on topic {key!r}{deadline}" if key else f"a message{deadline}"
        if kind == "child":
            return f"child workflow {key} to settle{deadline}"
        if kind == "retry":
            return f"the next try of step {key}{deadline}"
        if kind == ANY_WAIT:
            return f"the first of {key} waits to end{deadline}"
        return f"{self.waiting_for}{deadline}"

    @property
    def wake_at(self) -> datetime | None:
        """When a waiting workflow wakes by itself (its sleep ends, its receive times out)."""
        if self.status is not WorkflowStatus.WAITING or self.run_at >= FOREVER:
            return None
        return self.run_at


@dataclass(frozen=True, slots=True)
class BacklogRecord:
    """How many unfinished workflows of one name are in one queue with one status."""

    queue: str
    name: str
    status: WorkflowStatus
    count: int
    oldest: datetime
    """The earliest ``run_at`` among them (when the longest-due of them became due)."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One row of the ``workflow_steps`` table."""

    step_index: int
    step_name: str
    status: StepStatus
    input: str
    output: str | None = None
    error: str | None = None
    attempts: int = 1
    started_at: datetime | None = field(default=None, compare=False)
    """When its latest try began (or its wait); read by ``load_steps``, not by a claim."""
    completed_at: datetime | None = field(default=None, compare=False)
    """When it ended; ``None`` while it runs or waits."""
    path: str | None = None
    """Where a concurrent body called it (``"4.1"``); ``None``: ``str(step_index)``."""


@dataclass(frozen=True, slots=True)
class StepTryRecord:
    """One failed try of a step, as ``workflow_step_tries`` keeps it."""

    step_index: int
    try_number: int
    """The step row's ``attempts`` at that try (1 for its first)."""
    started_at: datetime
    ended_at: datetime
    error: str | None


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof that a worker holds a workflow: every write it makes carries this token."""

    workflow_id: str
    token: str
    worker_id: str
    attempt: int = 0
    """The attempt this lease was taken for (its row's ``attempts`` then)."""
    started_at: datetime | None = None
    """When it was taken."""


def settled_outcome(status: WorkflowStatus) -> str:
    """The outcome an attempt's history row records when it settles as ``status``:
    ``retry`` for a settle back to pending, else the status."""
    return "retry" if status is WorkflowStatus.PENDING else status.value


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One ended attempt of a workflow, as ``workflow_attempts`` keeps it."""

    attempt: int
    worker: str
    started_at: datetime | None
    ended_at: datetime
    outcome: str
    """``succeeded``, ``failed``, ``retry``, ``cancelled``, ``timed_out`` or ``crashed``."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EndedAttempts:
    """The attempts that ended after a cursor, counted by queue and outcome.

    ``cursor`` is passed back to count the next ones; ``counts`` maps
    ``(queue, outcome)`` to a number.
    """

    cursor: int
    counts: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(slots=True)  # not frozen: see the module's docstring
class ClaimedWorkflow:
    """A workflow a worker now holds, with what the executor needs to run it.

    ``steps`` is the cached step history when the store loaded it together with
    the claim; ``None`` asks the executor to load it with ``Store.load_steps``.
    """

    id: str
    name: str
    input: str
    attempts: int
    max_attempts: int
    lease: Lease
    steps: tuple[StepRecord, ...] | None = field(default=None)
    parent_id: str | None = None
    deadline: datetime | None = None
    crashed: Lease | None = None
    """The lease of the attempt before this one, when it ended by expiring (a crash)."""
    crashed_at: datetime | None = None
    """When that lease expired."""
    queue: str = DEFAULT_QUEUE
    headers: Mapping[str, str] | None = None
    """What the starter passed along (:attr:`NewWorkflow.headers`)."""
    due_at: datetime | None = None
    """When the workflow became runnable (its ``run_at`` before the claim), for the queue wait."""


@dataclass(frozen=True, slots=True)
class BodyCall:
    """The durable call of a running body that writes an effect (a send, a child start, an
    event, a reply...): the store writes the effect only while ``lease`` still holds the
    workflow, and records the call as a succeeded step (``record_step``'s row), in the
    transaction that writes the effect; else it raises
    :class:`~durable_core.errors.LeaseLostError` and writes nothing."""

    lease: Lease
    index: int
    name: str
    input: str
    output: str
    """The call's output JSON, as a replay returns it."""
    path: str | None = None
    """The call's path (:attr:`StepRecord.path`)."""


@dataclass(slots=True)  # not frozen: see the module's docstring
class StepWrite:
    """A step row to put, fenced by ``lease``: one write of a group commit
    (:class:`~durable_core.seams.store.BatchWriter`)."""

    lease: Lease
    index: int
    name: str
    status: StepStatus
    """``running`` (a try began), ``succeeded`` or ``failed`` (it ended)."""
    input: str
    output: str | None = None
    error: str | None = None
    new_try: bool = True
    """The row counts one more try of the step and starts again (``started_at``); False
    ends a row written earlier, or records a durable primitive's result."""
    began: float | None = None
    """When the try began, by ``time.monotonic()`` in the writing process: a new try's row
    starts that long before the statement that writes it (``None``: at the write)."""
    path: str | None = None
    """The step's path (:attr:`StepRecord.path`)."""


@dataclass(slots=True)  # not frozen: see the module's docstring
class Settlement:
    """An attempt's end, fenced by ``lease``: what ``settle`` writes, alone or in a group
    commit's batch. ``status`` is ``succeeded`` (with ``output``), ``failed`` (with
    ``error``) or ``pending`` (a retry, due ``retry_delay_seconds`` from now, with
    ``error``)."""

    lease: Lease
    status: WorkflowStatus
    output: str | None = None
    error: str | None = None
    retry_delay_seconds: float = 0.0
    parent_id: str | None = None
    """The parent a final status wakes if it waits on this workflow (``None``: none may)."""
    step: StepWrite | None = None
    """The attempt's last step write, written with the settlement (only if it lands): a
    group commit's (:class:`~durable_core.seams.store.BatchWriter`); a store's ``settle``
    takes none."""


@dataclass(frozen=True, slots=True)
class StreamPage:
    """Values of one stream key from an offset on: ``(offset, value JSON)`` in order, and
    whether the key is closed (its last entry read here is the close)."""

    entries: list[tuple[int, str]]
    closed: bool


class UpdateStatus(enum.StrEnum):
    """Where a caller's update stands."""

    PENDING = "pending"
    """Sent; the body has not received it."""
    TAKEN = "taken"
    """The body received it (recorded in its history) and has not replied."""
    REPLIED = "replied"
    REJECTED = "rejected"
    """The body's validator refused it; it never entered the history."""


@dataclass(frozen=True, slots=True)
class UpdateRecord:
    """One update of a workflow: its request, where it stands, and the reply or rejection."""

    workflow_id: str
    update_id: str
    name: str
    payload: str
    status: UpdateStatus
    reply: str | None
    error: str | None
