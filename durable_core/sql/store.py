"""``SQLStore``: the :class:`~durable_core.store.Store` for every SQL database, written once.

It runs the statements of :class:`~durable_core.sql.statements.Statements`
through a :class:`~durable_core.sql.connector.Connector` and reads their
results: which write was refused by fencing, why a retry or a cancel did not
apply, what a row holds. The built-in SQLite, MySQL and PostgreSQL stores are
this class with their own dialect and connector; a third-party store can be
too (README: "Writing a store plugin").
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Self

import sqlalchemy as sa

from .. import migrations
from ..errors import (
    FrameworkError,
    InvalidStateError,
    WorkflowConflictError,
    WorkflowNotFoundError,
)
from ..records import (
    AttemptRecord,
    BacklogRecord,
    ClaimedWorkflow,
    EndedAttempts,
    Lease,
    NewWorkflow,
    StepRecord,
    WaitKind,
    WorkflowRecord,
    WorkflowStatus,
)
from ..schema import SCHEMA_VERSION
from . import errors
from .connector import Connector, Params, Row, Session
from .dialect import SQLDialect
from .repeats import check_repeats, unique_starts
from .rows import (
    attempt_from_row,
    claimed_from_row,
    record_from_row,
    step_from_row,
    workflow_status,
)
from .schedules import ScheduleOperations
from .statements import CLAIMED_COLUMNS, Statements, wf
from .waiting import WaitingOperations

_LIST_PARAMS = {"parent_id": "parent", "queue": "queue_name"}
"""The parameter of each ``list_workflows`` filter whose name is a column's."""


class SQLStore(WaitingOperations, ScheduleOperations):
    """A store over any SQL database, given its dialect and a connector.

    It does not claim work for a worker: a store that can (PostgreSQL) adds the
    :class:`~durable_core.store.Claimer` methods in a subclass.
    """

    def __init__(
        self,
        connector: Connector,
        dialect: SQLDialect,
        *,
        description: str,
        statements: Statements | None = None,
    ) -> None:
        self.connector = connector
        self.dialect = dialect
        self.statements = statements or Statements(dialect)
        self._description = description
        self._open = False
        plan = dialect.plan_for_values
        self._plan_for_values = None if plan is None else sa.text(plan)
        self._steps_inline = (
            dialect.update_returning and self.statements.inline_steps(wf.c.id) is not None
        )

    # -- lifecycle ------------------------------------------------------------

    @property
    def description(self) -> str:
        """The database this store writes to, with no password in it."""
        return self._description

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` was called and :meth:`close` was not since."""
        return self._open

    async def open(self) -> None:
        """Connect. Calling it again on an open store does nothing."""
        if self._open:
            return
        try:
            await self.connector.open()
        except Exception as exc:
            raise self._failed("open", exc) from exc
        self._open = True

    async def close(self) -> None:
        """Release every connection."""
        if self._open:
            self._open = False
            await self.connector.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- schema ---------------------------------------------------------------

    async def apply_schema(self) -> None:
        """Create the durable tables, or upgrade them in place to this release's version."""

        def upgrade(conn: sa.Connection) -> tuple[int, int]:
            with self.dialect.migration_lock(conn):
                return migrations.upgrade(conn)

        await self._run_sync("apply_schema", upgrade)

    async def schema_version(self) -> int:
        """The database's schema version: 0 without the durable tables."""
        version: int = await self._run_sync("schema_version", migrations.current_version)
        return version

    async def check_schema(self) -> None:
        """Raise :class:`~durable_core.errors.SchemaMissingError` or
        :class:`~durable_core.errors.SchemaOutdatedError` unless the schema is current."""
        found = await self.schema_version()
        if found == 0:
            raise errors.schema_missing(self._description)
        if found < SCHEMA_VERSION:
            raise errors.schema_outdated(self._description, found, SCHEMA_VERSION)

    # -- running statements ---------------------------------------------------

    def _failed(self, operation: str, exc: BaseException) -> BaseException:
        failure = self.connector.classify(exc)
        if failure is None:
            return exc
        return errors.store_error(failure, exc, operation=operation, store=self._description)

    def _require_open(self) -> Connector:
        if not self._open:
            raise errors.not_open(self._description)
        return self.connector

    @contextmanager
    def _translated(self, operation: str) -> Iterator[Connector]:
        """The open connector; a database failure inside becomes the error a user sees."""
        connector = self._require_open()
        try:
            yield connector
        except FrameworkError:
            raise  # already says what went wrong
        except Exception as exc:
            failed = self._failed(operation, exc)
            if failed is exc:
                raise
            raise failed from exc

    async def _fetch(
        self, operation: str, statement: sa.Executable, params: Params
    ) -> Sequence[Row]:
        with self._translated(operation) as connector:
            return await connector.fetch(statement, self.dialect.bind_clock(params))

    async def _execute(self, operation: str, statement: sa.Executable, params: Params) -> int:
        with self._translated(operation) as connector:
            return await connector.execute(statement, self.dialect.bind_clock(params))

    @asynccontextmanager
    async def _transaction(self, operation: str) -> AsyncIterator[Session]:
        with self._translated(operation) as connector:
            async with connector.transaction() as session:
                yield session

    async def _run_sync(self, operation: str, work: Any) -> Any:
        with self._translated(operation) as connector:
            return await connector.run_sync(work)

    async def check_values(self, operation: str, *texts: str | None) -> None:
        """Refuse values the database could not take in one write (nothing by default)."""

    # -- enqueue and read side ------------------------------------------------

    async def enqueue(self, workflows: Sequence[NewWorkflow]) -> list[str]:
        """Insert pending workflows, all in one transaction, and wake idle workers.

        An id that exists already with the same workflow and input is skipped (a
        repeated start); with another workflow or input it raises
        :class:`~durable_core.errors.WorkflowConflictError` and nothing is written.
        Returns the ids written.
        """
        batch = unique_starts(workflows)
        if not batch:
            return []
        for row in batch:
            await self.check_values(f"enqueue of workflow {row.id}", row.input, row.name)
        if self.statements.enqueue_returns_ids and len(batch) == 1:
            # Nothing else to roll back on a conflict: one statement, no transaction.
            [params] = self.statements.enqueue_params(batch)
            return await self._insert_new(self.connector, batch, params)
        async with self._transaction("enqueue") as session:
            return await self._enqueue_in(session, batch)

    async def _enqueue_in(self, session: Session, batch: Sequence[NewWorkflow]) -> list[str]:
        """Enqueue ``batch`` (unique ids) inside the transaction ``session``."""
        q = self.statements
        if q.enqueue_returns_ids:
            [params] = q.enqueue_params(batch)
            return await self._insert_new(session, batch, params)
        existing = await session.fetch(q.existing, {"ids": [row.id for row in batch]})
        check_repeats(batch, existing)
        taken = {found["id"] for found in existing}
        new = [row for row in batch if row.id not in taken]
        if new:
            bound = [self.dialect.bind_clock(p) for p in q.enqueue_params(new)]
            await session.execute_many(q.enqueue, bound)
        return [row.id for row in new]

    async def _insert_new(
        self, session: Session, batch: Sequence[NewWorkflow], params: Params
    ) -> list[str]:
        """Run the one-statement enqueue; check the rows it skipped repeat their starts."""
        q = self.statements
        with self._translated("enqueue"):
            [result] = await session.fetch(q.enqueue, params)
            inserted = set(result["ids"] or ())
            skipped = [row for row in batch if row.id not in inserted]
            if skipped:
                existing = await session.fetch(q.existing, {"ids": [row.id for row in skipped]})
                check_repeats(skipped, existing)
        return [row.id for row in batch if row.id in inserted]

    async def get_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """One workflow row, or ``None``."""
        rows = await self._fetch("get_workflow", self.statements.get, {"workflow": workflow_id})
        return record_from_row(rows[0]) if rows else None

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
    ) -> list[WorkflowRecord]:
        """The newest workflows first, optionally filtered (see ``Store.list_workflows``)."""
        given = {
            "status": None if status is None else status.value,
            "name": name,
            "queue": queue,
            "parent_id": parent_id,
            "created_after": created_after,
            "created_before": created_before,
            "before": before,
        }
        filters = {key: value for key, value in given.items() if value is not None}
        query = self.statements.list_workflows(frozenset(filters))
        params: dict[str, Any] = {"limit": limit}
        for key, value in filters.items():
            params[_LIST_PARAMS.get(key, key)] = value
        if self._plan_for_values is None or not filters:
            rows = await self._fetch("list_workflows", query, params)
        else:
            # A rare name or status is found through its own index, a common one by walking
            # the creation order: only a plan made for the values can tell which it is.
            async with self._transaction("list_workflows") as session:
                await session.execute(self._plan_for_values)
                rows = await session.fetch(query, self.dialect.bind_clock(params))
        return [record_from_row(row) for row in rows]

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        """Every step of a workflow, by index, with when each began and ended."""
        params = {"workflow": workflow_id}
        rows = await self._fetch("load_steps", self.statements.load_steps, params)
        return [
            replace(
                step_from_row(workflow_id, row),
                started_at=row["started_at"],
                completed_at=row["completed_at"],
            )
            for row in rows
        ]

    # -- monitoring -------------------------------------------------------------

    async def count_ended_attempts(self, after: int | None) -> EndedAttempts:
        """The attempts ended since the cursor ``after``, by queue and outcome."""
        q = self.statements
        rows = await self._fetch("count_ended_attempts", q.last_attempt, {})
        upto = int(rows[0]["seq"] or 0)
        if after is None or upto <= after:
            return EndedAttempts(cursor=upto)
        params = {"after": after, "upto": upto}
        counted = await self._fetch("count_ended_attempts", q.count_ended, params)
        return EndedAttempts(
            cursor=upto, counts={(row["queue"], row["outcome"]): row["n"] for row in counted}
        )

    async def backlog(self) -> list[BacklogRecord]:
        """Unfinished workflows counted by queue, name and status (one index scan)."""
        rows = await self._fetch("backlog", self.statements.backlog, {})
        return [
            BacklogRecord(
                queue=row["queue"],
                name=row["name"],
                status=workflow_status(f"named {row['name']}", row["status"]),
                count=row["count"],
                oldest=row["oldest"],
            )
            for row in rows
        ]

    async def _refuse(self, workflow_id: str, operation: str, rule: str) -> None:
        """Say why a transition did not apply: no such workflow, or not in a state it allows."""
        rows = await self._fetch(operation, self.statements.status, {"workflow": workflow_id})
        if not rows:
            raise WorkflowNotFoundError(
                f"no workflow with id {workflow_id!r} in {self._description}"
            )
        raise InvalidStateError(f"workflow {workflow_id} is {rows[0]['status']}; {rule}")

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
        wakes. ``reason`` (an error JSON) is recorded as the workflow's error."""
        q = self.statements
        rows = await self._fetch("cancel_workflow", q.parent, {"workflow": workflow_id})
        parent = rows[0]["parent_id"] if rows else None
        params = {"workflow": workflow_id, "error_json": reason}
        # The workflow and its interrupted step end together.
        if not await self._end(
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
                await self.cancel_workflow(child["id"], reason)

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

    # -- attempt history ------------------------------------------------------

    async def record_attempt(
        self, lease: Lease, outcome: str, error: str | None, ended_at: datetime | None = None
    ) -> None:
        """Record how the attempt of ``lease`` ended when it did not settle itself (it was
        cancelled, timed out, or crashed: ``ended_at`` is then when its lease expired)."""
        params = {"workflow": lease.workflow_id, "error_json": error, **_history(lease, outcome)}
        params["ended"] = ended_at
        await self._execute("record_attempt", self.statements.record_attempt, params)

    async def load_attempts(self, workflow_id: str) -> list[AttemptRecord]:
        """Every ended attempt of a workflow, oldest first."""
        params = {"workflow": workflow_id}
        rows = await self._fetch("load_attempts", self.statements.load_attempts, params)
        return [attempt_from_row(row) for row in rows]

    # -- execution side (every write fenced by the lease) ---------------------

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

    async def _fenced(
        self, lease: Lease, operation: str, statement: sa.Executable, what: str, **params: Any
    ) -> None:
        params["workflow"], params["token"] = lease.workflow_id, lease.token
        if not await self._execute(operation, statement, params):
            raise errors.lease_lost(lease, what)

    async def start_step(self, lease: Lease, step_index: int, step_name: str, input: str) -> None:
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
        """Record a step's error as failed."""
        await self.check_values(f"fail_step {step_index}", error)
        await self._fenced(
            lease,
            "fail_step",
            self.statements.fail_step,
            f"fail_step for step {step_index}",
            index=step_index,
            error_json=error,
        )

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        """Extend the lease to ``lease_seconds`` from now."""
        await self._fenced(
            lease,
            "heartbeat",
            self.statements.heartbeat,
            "renewing the lease",
            lease_seconds=float(lease_seconds),
        )

    async def settle(
        self,
        lease: Lease,
        status: WorkflowStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        retry_delay_seconds: float = 0.0,
        parent_id: str | None = None,
    ) -> None:
        """End the attempt as ``status`` and release the lease; a final status wakes the
        parent ``parent_id`` if it waits on this workflow."""
        await self.check_values(f"settle as {status.value}", output, error)
        q = self.statements
        params: dict[str, Any] = {
            "workflow": lease.workflow_id,
            "token": lease.token,
            "output_json": output,
            "error_json": error,
        }
        if status is WorkflowStatus.PENDING:
            params["delay_seconds"] = retry_delay_seconds
            statement, recorded, parent_id = q.settle_retry, q.settle_retry_recorded, None
            params.update(_history(lease, "retry"))
        else:
            params["outcome"] = status.value
            statement, recorded = q.settle_final, q.settle_final_recorded
            params.update(_history(lease, status.value))
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
