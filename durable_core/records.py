"""Plain data passed across the Store seam: statuses, rows and leases."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime


class WorkflowStatus(enum.StrEnum):
    """Where a workflow instance stands."""

    PENDING = "pending"
    RUNNING = "running"
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
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    """A workflow instance to enqueue. ``input`` is the encoded argument JSON."""

    id: str
    name: str
    input: str
    max_attempts: int
    delay_seconds: float = 0.0


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


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof that a worker holds a workflow: every write it makes carries this token."""

    workflow_id: str
    token: str
    worker_id: str


@dataclass(frozen=True, slots=True)
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
