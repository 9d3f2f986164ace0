"""``SQLStoreBase``: what every part of the shared SQL store stands on.

It holds the connector, the dialect and the statements, opens and closes them,
applies the schema, runs statements with a database failure turned into the
error a user sees, fences a write by its lease, says why a transition did not
apply, and writes new workflow rows (for a start, a fork or a schedule's tick).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, NoReturn, Self

import sqlalchemy as sa

from ..errors import (
    FrameworkError,
    InvalidStateError,
    StoreUnavailableError,
    WorkflowNotFoundError,
)
from ..redaction import get_logger, redact
from ..seams.records import BodyCall, Lease, NewWorkflow
from . import errors, migrations
from .connector import Connector, Fetcher, Params, Row, Session
from .dialect import SQLDialect
from .errors import Failure
from .reachability import reachability
from .repeats import check_repeats, unique_starts
from .rules import wf
from .schema import SCHEMA_VERSION
from .schema_ops import NOT_ADDITIVE
from .statements import Statements

logger = get_logger("durable_core.store")


class SQLStoreBase:
    """The connector, dialect and statements of a SQL store, and how statements run."""

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
        self._description = redact(description)
        self.reachability = reachability(self._description)
        """Whether the database answers, as this process sees it (one log line when it
        stops, one when it is back)."""
        self._open = False
        plan = dialect.plan_for_values
        self._plan_for_values = None if plan is None else sa.text(plan)
        self._steps_inline = (
            dialect.update_returning and self.statements.inline_steps(wf.c.id) is not None
        )

    @property
    def description(self) -> str:
        """The database this store writes to, with no credential in it (whatever the
        backend gave, through :func:`~durable_core.redaction.redact`)."""
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
            # Not an outage to wait out: the caller is told at once, and only once.
            raise self._failed("open", exc, report=False) from exc
        self._open = True
        self.reachability.reached()

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
        :class:`~durable_core.errors.SchemaOutdatedError` unless the schema is current.

        On a schema a newer release migrated, log one line when its newer versions are all
        additive (this release runs on it), else raise
        :class:`~durable_core.errors.SchemaTooNewError`."""
        found = await self.schema_version()
        if found == 0:
            raise errors.schema_missing(self._description)
        if found < SCHEMA_VERSION:
            raise errors.schema_outdated(self._description, found, SCHEMA_VERSION)
        if found > SCHEMA_VERSION:
            newer = await self._run_sync("check_schema", migrations.newer_versions)
            if any(text.startswith(NOT_ADDITIVE) for _, text in newer):
                raise errors.schema_too_new(self._description, newer)
            logger.warning(
                "%s has durable schema version %d, migrated by a newer release than this one "
                "(version %d); its newer versions are additive, so this release runs on it: "
                "roll the newer release out",
                self._description,
                found,
                SCHEMA_VERSION,
            )

    def _failed(self, operation: str, exc: BaseException, *, report: bool = True) -> BaseException:
        failure = self.connector.classify(exc)
        if failure is None:
            return exc
        error = errors.store_error(failure, exc, operation=operation, store=self._description)
        if report and failure is Failure.UNAVAILABLE and isinstance(error, StoreUnavailableError):
            self.reachability.lost(operation, exc)
            error.reported = True
        return error

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
        except Exception as exc:
            self._raise_translated(operation, exc)

    def _raise_translated(self, operation: str, exc: Exception) -> NoReturn:
        """Raise ``exc`` as the error a user sees (a :class:`FrameworkError` as it is)."""
        if isinstance(exc, FrameworkError):
            raise exc  # already says what went wrong
        failed = self._failed(operation, exc)
        if failed is exc:
            raise exc
        raise failed from exc

    async def _fetch(
        self, operation: str, statement: sa.Executable, params: Params, *, on: Fetcher | None = None
    ) -> Sequence[Row]:
        """``statement``'s rows, sent by the connector or by ``on`` (a connection one task
        keeps)."""
        # The hot path (every flush and claim): :meth:`_translated` without its generator.
        connector = self._require_open()
        try:
            rows = await (on or connector).fetch(statement, self.dialect.bind_clock(params))
        except Exception as exc:
            self._raise_translated(operation, exc)
        if self.reachability.down_since is not None:
            self.reachability.reached()
        return rows

    async def _execute(self, operation: str, statement: sa.Executable, params: Params) -> int:
        with self._translated(operation) as connector:
            count = await connector.execute(statement, self.dialect.bind_clock(params))
        self.reachability.reached()
        return count

    @asynccontextmanager
    async def _transaction(self, operation: str) -> AsyncIterator[Session]:
        with self._translated(operation) as connector:
            async with connector.transaction() as session:
                yield session
        self.reachability.reached()

    async def _run_sync(self, operation: str, work: Any) -> Any:
        with self._translated(operation) as connector:
            result = await connector.run_sync(work)
        self.reachability.reached()
        return result

    async def check_values(self, operation: str, *texts: str | None) -> None:
        """Refuse values the database could not take in one write (nothing by default)."""

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
        if self.statements.enqueue_returns_ids and len(batch) == 1 and not batch[0].attributes:
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
            written = await self._insert_new(session, batch, params)
            await self._enqueued(session, [row for row in batch if row.id in set(written)])
            return written
        existing = await session.fetch(q.existing, {"ids": [row.id for row in batch]})
        check_repeats(batch, existing)
        taken = {found["id"] for found in existing}
        new = [row for row in batch if row.id not in taken]
        if new:
            bound = [self.dialect.bind_clock(p) for p in q.enqueue_params(new)]
            await session.execute_many(q.enqueue, bound)
            await self._enqueued(session, new)
        return [row.id for row in new]

    async def _enqueued(self, session: Session, rows: Sequence[NewWorkflow]) -> None:
        """Write what comes with the new ``rows`` beyond their own (their attributes), in the
        transaction that inserted them (nothing here)."""

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

    async def _fenced(
        self, lease: Lease, operation: str, statement: sa.Executable, what: str, **params: Any
    ) -> None:
        params["workflow"], params["token"] = lease.workflow_id, lease.token
        if not await self._execute(operation, statement, params):
            raise errors.lease_lost(lease, what)

    async def _fence(self, session: Session, lease: Lease, what: str) -> None:
        """Fence the transaction ``session`` by ``lease``: lock the workflow's row until it
        ends if the lease still holds it, else :class:`LeaseLostError` (roll it all back).

        Where a database begins a transaction only at its first write (SQLite's driver),
        this read runs before it: there the fenced write that records the call
        (:meth:`_record_call`, after the effect, under the database's single writer lock)
        is what refuses it."""
        held = {"workflow": lease.workflow_id, "token": lease.token}
        if not await session.fetch(self.statements.held, held):
            raise errors.lease_lost(lease, what)

    async def _record_call(self, session: Session, call: BodyCall, what: str) -> None:
        """Record ``call`` as a succeeded step in the transaction ``session``, fenced by its
        lease (refused: :class:`LeaseLostError`, the transaction rolled back)."""
        lease = call.lease
        params = {
            "workflow": lease.workflow_id,
            "token": lease.token,
            "index": call.index,
            "step_name": call.name,
            "input": call.input,
            "output_json": call.output,
            "path": call.path,
        }
        bound = self.dialect.bind_clock(params)
        if not await session.execute(self.statements.record_step, bound):
            raise errors.lease_lost(lease, what)

    async def _check_call(self, call: BodyCall) -> None:
        """Refuse a call whose record the database could not take in one write."""
        what = f"recording {call.name} {call.index}"
        await self.check_values(what, call.input, call.output, call.name)

    async def enqueue_from(self, call: BodyCall, workflows: Sequence[NewWorkflow]) -> list[str]:
        """:meth:`enqueue` from a running body, fenced by ``call.lease`` and with ``call``
        recorded, in one transaction; the ids written."""
        batch = unique_starts(workflows)
        for row in batch:
            await self.check_values(f"enqueue of workflow {row.id}", row.input, row.name)
        await self._check_call(call)
        what = f"starting {len(batch)} workflows"
        async with self._transaction("enqueue") as session:
            await self._fence(session, call.lease, what)
            written = await self._enqueue_in(session, batch) if batch else []
            await self._record_call(session, call, what)
        return written

    async def _refuse(self, workflow_id: str, operation: str, rule: str) -> None:
        """Say why a transition did not apply: no such workflow, or not in a state it allows."""
        rows = await self._fetch(operation, self.statements.status, {"workflow": workflow_id})
        if not rows:
            raise WorkflowNotFoundError(
                f"no workflow with id {workflow_id!r} in {self._description}"
            )
        raise InvalidStateError(f"workflow {workflow_id} is {rows[0]['status']}; {rule}")
