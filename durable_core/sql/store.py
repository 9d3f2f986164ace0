"""``SQLStore``: the :class:`~durable_core.seams.store.Store` for every SQL database, written once.

It runs the statements of :class:`~durable_core.sql.statements.Statements`
through a :class:`~durable_core.sql.connector.Connector` and reads their
results: which write was refused by fencing, why a retry or a cancel did not
apply, what a row holds. The built-in SQLite, MySQL and PostgreSQL stores are
this class with their own dialect and connector; a third-party store can be
too (docs/how-to/store-plugin.md: "Writing a store plugin").
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..codec.failures import cancellation_record, dump_error
from ..errors import InvalidArgumentsError, InvalidStateError, WorkflowConflictError
from ..seams.records import (
    ClaimedWorkflow,
    Lease,
    NewWorkflow,
    Settlement,
    WaitKind,
    WorkflowStatus,
    settled_outcome,
)
from ..seams.transactions import StepDatabase
from . import errors
from .attributes import AttributeOperations
from .compensation import CompensationOperations
from .connector import Params
from .debounce import DebounceOperations
from .erasure import ErasureOperations
from .operators import OperatorOperations
from .reading import ReadOperations
from .retention import PruningOperations
from .rows import claimed_from_row
from .schedule_overlap import ScheduleOverlapOperations
from .schedules import ScheduleOperations
from .statements import CLAIMED_COLUMNS
from .streams import StreamOperations
from .transactions import StoreTransactions
from .updates import UpdateOperations
from .waiting import WaitingOperations
from .workers import WorkerOperations


class SQLStore(
    PruningOperations,
    ErasureOperations,
    CompensationOperations,
    WaitingOperations,
    StreamOperations,
    UpdateOperations,
    DebounceOperations,
    AttributeOperations,
    ScheduleOperations,
    ScheduleOverlapOperations,
    WorkerOperations,
    OperatorOperations,
    ReadOperations,
):
    """A store over any SQL database, given its dialect and a connector.

    It does not claim work for a worker: a store that can (PostgreSQL) adds the
    :class:`~durable_core.seams.store.Claimer` methods in a subclass.
    """

    def step_database(self) -> StepDatabase:
        """This store's database, for transaction steps (their record is the step's row)."""
        return StoreTransactions(self)

    async def retry_workflow(self, workflow_id: str) -> None:
        """Put a failed or cancelled workflow back to pending with a fresh attempt budget."""
        params = {"workflow": workflow_id}
        if not await self._execute("retry_workflow", self.statements.retry, params):
            await self._refuse(
                workflow_id, "retry_workflow", "only failed or cancelled workflows can be retried"
            )

    async def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        """Cancel an unfinished workflow and its unfinished children; its holder loses the
        lease, its running or waiting step ends ``cancelled``, and a parent waiting on it
        wakes. One that owes compensations (a saga's) is asked to run them first: it
        settles cancelled once its worker has. ``reason`` (an error JSON) is recorded as
        the workflow's error and its children's; without one, each records a cancellation
        of its own."""
        await self._cancel(workflow_id, reason, None)

    async def _cancel(self, workflow_id: str, reason: str | None, with_parent: str | None) -> None:
        q = self.statements
        rows = await self._fetch("cancel_workflow", q.parent, {"workflow": workflow_id})
        parent = rows[0]["parent_id"] if rows else None
        if reason is None:
            error = dump_error(cancellation_record(workflow_id, with_parent))
        else:
            error = reason
        params = {"workflow": workflow_id, "error_json": error}
        # One owing compensations is asked to run them first (sql/compensation.py); else
        # the workflow and its interrupted step end together.
        if not await self._request_cancel(workflow_id, error) and not await self._end(
            "cancel_workflow", q.cancel, params, parent=parent, then=q.cancel_steps
        ):
            await self._refuse(
                workflow_id,
                "cancel_workflow",
                "only pending, running or waiting workflows can be cancelled",
            )
        children = await self._fetch("cancel_workflow", q.children, {"workflow": workflow_id})
        for child in children:
            with contextlib.suppress(InvalidStateError):  # it settled meanwhile
                await self._cancel(child["id"], reason, workflow_id)

    async def fork_workflow(self, workflow: NewWorkflow, source_id: str, before_step: int) -> None:
        """Insert ``workflow`` with copies of ``source_id``'s succeeded steps below index
        ``before_step`` as its step cache, in one transaction; an existing id conflicts."""
        await self.check_values(f"fork of workflow {source_id}", workflow.input, workflow.name)
        params = {"workflow": source_id, "fork": workflow.id, "before": before_step}
        async with self._transaction("fork_workflow") as session:
            if not await self._enqueue_in(session, [workflow]):
                raise WorkflowConflictError(
                    f"cannot fork workflow {source_id} as {workflow.id!r}: that id is taken"
                )
            await session.execute(self.statements.copy_steps, params)

    async def _end(
        self,
        operation: str,
        statement: sa.Executable,
        params: Params,
        *,
        parent: str | None = None,
        record: bool = False,
        then: sa.Executable | None = None,
    ) -> bool:
        """In one transaction: run ``statement``, which ends workflow ``params["workflow"]``
        (False, writing nothing, when it matches no row), then ``then`` with the same
        parameters, record the attempt's history row when ``record`` (``params`` hold its
        values), and wake its ``parent`` if that waits on it.

        The parent's row is locked first: a parent suspending on this child locks its
        own row before it looks at the child, so one of the two sees the other.
        """
        q, bind = self.statements, self.dialect.bind_clock
        async with self._transaction(operation) as session:
            if parent is not None:
                await session.fetch(q.lock, {"workflow": parent})
            if not await session.execute(statement, bind(params)):
                return False
            if then is not None:
                await session.execute(then, bind(params))
            if record:
                await session.execute(q.record_attempt, bind(params))
            if parent is not None:
                waiting_for = f"{WaitKind.CHILD.value}:{params['workflow']}"
                await session.execute(
                    q.wake, bind({"workflow": parent, "waiting_for": waiting_for})
                )
        return True

    async def record_attempt(
        self, lease: Lease, outcome: str, error: str | None, ended_at: datetime | None = None
    ) -> None:
        """Record how the attempt of ``lease`` ended when it did not settle itself (it was
        cancelled, timed out, or crashed: ``ended_at`` is then when its lease expired)."""
        params = {"workflow": lease.workflow_id, "error_json": error, **_history(lease, outcome)}
        params["ended"] = ended_at
        await self._execute("record_attempt", self.statements.record_attempt, params)

    async def acquire(
        self, workflow_id: str, *, worker_id: str, lease_seconds: float, due_only: bool = True
    ) -> ClaimedWorkflow | None:
        """Lease one runnable workflow by id (one more attempt), or return ``None``."""
        q = self.statements
        statement = q.acquire_due if due_only else q.acquire_any
        params: Params = {
            "workflow": workflow_id,
            "worker": worker_id,
            "token": str(uuid.uuid4()),
            "lease_seconds": float(lease_seconds),
        }
        async with self._transaction("acquire") as session:
            params = self.dialect.bind_clock(params)
            prior = await session.fetch(q.prior, params)
            if self.dialect.update_returning:
                rows = await session.fetch(statement, params)
            else:
                changed = await session.execute(statement, params)
                rows = await session.fetch(q.leased, params) if changed else []
        if not rows:
            return None
        # Taken over from a running attempt: that attempt's lease expired (a crash).
        reclaimed = prior[0]["status"] == WorkflowStatus.RUNNING.value
        row = {
            **{key: rows[0][key] for key in (*_CLAIMED_KEYS, *(("steps",) * self._steps_inline))},
            "crashed_worker": prior[0]["locked_by"] if reclaimed else None,
            "crashed_at": prior[0]["locked_until"] if reclaimed else None,
        }
        return claimed_from_row(row, worker_id, steps=self._steps_inline, crashed=True)

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        """Record a step as running (insert, or reset an earlier run)."""
        await self.check_values(f"start_step {step_index}", input, step_name)
        await self._fenced(
            lease,
            "start_step",
            self.statements.start_step,
            f"recording step {step_index} ({step_name})",
            index=step_index,
            step_name=step_name,
            input=input,
            path=path,
        )

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        """Record a step's output as succeeded."""
        await self.check_values(f"complete_step {step_index}", output)
        await self._fenced(
            lease,
            "complete_step",
            self.statements.complete_step,
            f"complete_step for step {step_index}",
            index=step_index,
            output_json=output,
        )

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        """Record a step's error as failed, and keep the failed try (``load_step_tries``)."""
        await self.check_values(f"fail_step {step_index}", error)
        q = self.statements
        params = {
            "workflow": lease.workflow_id,
            "token": lease.token,
            "index": step_index,
            "error_json": error,
        }
        if q.fail_step_recorded is not None:
            failed = await self._execute("fail_step", q.fail_step_recorded, params)
        else:
            async with self._transaction("fail_step") as session:
                bound = self.dialect.bind_clock(params)
                failed = await session.execute(q.fail_step, bound)
                if failed:
                    await session.execute(q.record_try, bound)
        if not failed:
            raise errors.lease_lost(lease, f"fail_step for step {step_index}")

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        """Extend the lease to ``lease_seconds`` from now."""
        await self._fenced(
            lease,
            "heartbeat",
            self.statements.heartbeat,
            "renewing the lease",
            lease_seconds=float(lease_seconds),
        )

    async def settle(self, settlement: Settlement) -> None:
        """End the attempt as ``settlement.status`` and release the lease; a final status
        wakes the parent ``settlement.parent_id`` if it waits on this workflow."""
        lease, status = settlement.lease, settlement.status
        if settlement.step is not None:
            raise InvalidArgumentsError(
                f"settle of workflow {lease.workflow_id}: a settlement's step is written by a "
                "group commit (BatchWriter.write_batch), not by Store.settle"
            )
        await self.check_values(f"settle as {status.value}", settlement.output, settlement.error)
        q = self.statements
        params: dict[str, Any] = {
            "workflow": lease.workflow_id,
            "token": lease.token,
            "output_json": settlement.output,
            "error_json": settlement.error,
        }
        parent_id = settlement.parent_id
        if status is WorkflowStatus.PENDING:
            params["delay_seconds"] = settlement.retry_delay_seconds
            statement, recorded, parent_id = q.settle_retry, q.settle_retry_recorded, None
        else:
            params["outcome"] = status.value
            statement, recorded = q.settle_final, q.settle_final_recorded
        params.update(_history(lease, settled_outcome(status)))
        if parent_id is None and recorded is not None:
            settled = bool(await self._execute("settle", recorded, params))
        else:
            settled = await self._end("settle", statement, params, parent=parent_id, record=True)
        if not settled:
            raise errors.lease_lost(lease, f"settling as {status.value}")


def _history(lease: Lease, outcome: str) -> Params:
    """The parameters of the attempt's history row, besides its workflow and error."""
    return {
        "attempt_no": lease.attempt,
        "worker_name": lease.worker_id,
        "started": lease.started_at,
        "ended": None,
        "ended_as": outcome,
    }


_CLAIMED_KEYS = tuple(column.name for column in CLAIMED_COLUMNS)
