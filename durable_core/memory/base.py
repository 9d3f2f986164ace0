"""What every part of the memory store stands on: its tables, opening and closing,
fencing a write by its lease, writing step rows and new workflow rows, waking a waiter.

Each rule is the one :mod:`durable_core.sql` writes as SQL (the rule's home is named
beside it), kept in plain Python over :class:`~durable_core.memory.tables.Tables`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Self

import anyio.lowlevel

from ..errors import FrameworkError, InvalidStateError, WorkflowNotFoundError
from ..seams.attributes import AttributeValue, check_attributes, kind_of
from ..seams.records import ANY_WAIT, BodyCall, Lease, NewWorkflow, StepStatus, WorkflowStatus
from ..sql import errors
from ..sql.repeats import check_repeats, unique_starts
from .tables import Row, Tables, new_row, now


class MemoryBase:
    """The tables of a memory store and the rules its operations share."""

    def __init__(self, *, tables: Tables | None = None, description: str | None = None) -> None:
        self.tables = tables if tables is not None else Tables()
        self._description = description or f"memory store {uuid.uuid4().hex[:8]}"
        self._open = True  # nothing to connect to: usable from the start

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def description(self) -> str:
        """``memory store <id>``: what errors name it by."""
        return self._description

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` was called and :meth:`close` was not since."""
        return self._open

    async def open(self) -> None:
        """Nothing to connect to (a new store is open already): operations run again after
        :meth:`close`."""
        self._open = True

    async def close(self) -> None:
        """Operations refuse from now on; the tables stay (another open sees them)."""
        self._open = False

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def apply_schema(self) -> None:
        """Nothing to create: the tables are there from the start."""

    async def check_schema(self) -> None:
        """Always current."""

    async def _begin(self) -> Tables:
        """The tables, once the store is open (else the error a closed SQL store gives),
        after letting other tasks run: an operation is a checkpoint, as a database's
        round trip is, and then runs to its end under the lock without awaiting."""
        await anyio.lowlevel.checkpoint()
        if not self._open:
            raise errors.not_open(self._description)
        return self.tables

    # -- fencing -----------------------------------------------------------------------------

    def _held(self, t: Tables, lease: Lease) -> Row | None:
        """The workflow's row while ``lease`` holds it (``sql.rules.holds``), else ``None``."""
        row = t.workflows.get(lease.workflow_id)
        if row is None or row["lock_token"] is None or row["lock_token"] != lease.token:
            return None
        return row

    def _fence(self, t: Tables, lease: Lease, what: str) -> Row:
        """The row ``lease`` holds, or :class:`~durable_core.errors.LeaseLostError`."""
        row = self._held(t, lease)
        if row is None:
            raise errors.lease_lost(lease, what)
        return row

    # -- step rows ---------------------------------------------------------------------------

    def _put_step(
        self,
        t: Tables,
        workflow_id: str,
        index: int,
        *,
        name: str,
        status: StepStatus,
        input: str,
        output: str | None,
        at: datetime,
        path: str | None,
        new_try: bool = False,
        keep_error: bool = False,
    ) -> None:
        """Insert step row ``index`` or reset it (``sql.rules.put_step``): ``new_try`` counts
        one more try and starts it again; ``keep_error`` keeps its last error."""
        steps = t.steps.setdefault(workflow_id, {})
        completed = at if status is StepStatus.SUCCEEDED else None
        old = steps.get(index)
        if old is None:
            steps[index] = {
                "step_index": index,
                "step_name": name,
                "status": status.value,
                "input": input,
                "output": output,
                "error": None,
                "attempts": 1,
                "started_at": at,
                "completed_at": completed,
                "path": path,
            }
            return
        old.update(
            step_name=name,
            status=status.value,
            input=input,
            output=output,
            completed_at=completed,
            path=path,
        )
        if not keep_error:
            old["error"] = None
        if new_try:
            old["attempts"] += 1
            old["started_at"] = at

    def _record_call(self, t: Tables, call: BodyCall, what: str, at: datetime) -> None:
        """Record ``call`` as a succeeded step, fenced by its lease (``record_step``)."""
        self._fence(t, call.lease, what)
        self._put_step(
            t,
            call.lease.workflow_id,
            call.index,
            name=call.name,
            status=StepStatus.SUCCEEDED,
            input=call.input,
            output=call.output,
            at=at,
            path=call.path,
        )

    # -- new rows, waking --------------------------------------------------------------------

    def _check_new(self, t: Tables, batch: Sequence[NewWorkflow]) -> list[NewWorkflow]:
        """The rows of ``batch`` (unique ids) to insert; a conflicting repeat raises
        :class:`~durable_core.errors.WorkflowConflictError` before anything is written."""
        existing = [t.workflows[row.id] for row in batch if row.id in t.workflows]
        check_repeats(batch, existing)
        for row in batch:
            if row.attributes:
                check_attributes(row.attributes)
        return [row for row in batch if row.id not in t.workflows]

    def _insert(self, t: Tables, rows: Sequence[NewWorkflow], at: datetime) -> list[str]:
        """Insert ``rows`` (checked by :meth:`_check_new`) with their attributes."""
        for row in rows:
            t.workflows[row.id] = new_row(row, at)
            if row.attributes:
                self._write_attributes(t, row.id, check_attributes(row.attributes))
        return [row.id for row in rows]

    def _write_attributes(
        self, t: Tables, workflow_id: str, values: dict[str, AttributeValue | None]
    ) -> None:
        """Set (``None``: remove) the attributes of an existing workflow."""
        if workflow_id not in t.workflows:
            return
        mine = t.attributes.setdefault(workflow_id, {})
        for name, value in values.items():
            if value is None:
                mine.pop(name, None)
            else:
                mine[name] = float(value) if kind_of(value) == "number" else value

    def _wake(self, t: Tables, workflow_id: str, waiting_for: str, at: datetime) -> None:
        """Make a workflow waiting on ``waiting_for`` (or on several waits) due now
        (``Statements.wake``)."""
        row = t.workflows.get(workflow_id)
        if row is None or row["status"] != WorkflowStatus.WAITING.value:
            return
        mine = row["waiting_for"] or ""
        if mine == waiting_for or mine.startswith(f"{ANY_WAIT}:"):
            row.update(
                status=WorkflowStatus.PENDING.value, run_at=at, waiting_for=None, updated_at=at
            )

    def _refuse(self, t: Tables, workflow_id: str, rule: str) -> FrameworkError:
        """Why a transition did not apply: no such workflow, or not in a state it allows."""
        row = t.workflows.get(workflow_id)
        if row is None:
            return WorkflowNotFoundError(
                f"no workflow with id {workflow_id!r} in {self._description}"
            )
        return InvalidStateError(f"workflow {workflow_id} is {row['status']}; {rule}")

    # -- starts ------------------------------------------------------------------------------

    async def enqueue(self, workflows: Sequence[NewWorkflow]) -> list[str]:
        """Insert pending workflows, all or none; the ids written (a repeated start with the
        same workflow and input is skipped, another raises
        :class:`~durable_core.errors.WorkflowConflictError`)."""
        batch = unique_starts(workflows)
        t = await self._begin()
        with t.lock:
            return self._insert(t, self._check_new(t, batch), now())

    async def enqueue_from(self, call: BodyCall, workflows: Sequence[NewWorkflow]) -> list[str]:
        """:meth:`enqueue` from a running body, fenced by ``call.lease``, ``call`` recorded."""
        batch = unique_starts(workflows)
        what = f"starting {len(batch)} workflows"
        t = await self._begin()
        with t.lock:
            self._fence(t, call.lease, what)
            fresh = self._check_new(t, batch)
            at = now()
            written = self._insert(t, fresh, at)
            self._record_call(t, call, what, at)
        return written
