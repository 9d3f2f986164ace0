"""Erasing a settled workflow's payloads (part of ``SQLStore``): the rule of what an erasure
replaces, written once for every SQL backend.

In one transaction, under the row locks of the workflow and its descendants (children,
their children...: they were started with its data): their inputs, outputs and errors;
their steps' inputs, outputs and errors; their failed tries' and attempts' errors; the
messages sent to them, their events, stream items, updates' payloads, replies and errors
become tombstones (:mod:`durable_core.codec.erasure`); their searchable attributes are
deleted. Their rows, statuses, timings, step names and statuses, attempts and the errors'
types stay, for audit. Only settled workflows (succeeded, failed or cancelled) are
erased: a running one would write again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ..codec.erasure import erased_error, tombstone
from ..errors import InvalidStateError, WorkflowNotFoundError
from ..seams.records import WorkflowStatus
from . import schema
from .base import SQLStoreBase
from .connector import Session
from .rules import param

wf, st, tr, att = (
    schema.workflows,
    schema.workflow_steps,
    schema.workflow_step_tries,
    schema.workflow_attempts,
)
msg, ev, stream, up, attrs = (
    schema.workflow_messages,
    schema.workflow_events,
    schema.workflow_streams,
    schema.workflow_updates,
    schema.workflow_attributes,
)


ERASED_TABLES = (wf, st, tr, att, msg, ev, stream, up, attrs)
"""The tables an erasure rewrites or deletes from."""
PAYLOAD_FREE = (schema.workflow_debounces,)
"""The tables of a workflow's rows that hold none of its payloads (an erasure leaves them;
a prune, :data:`durable_core.sql.retention.OWNED`, removes them with the rest)."""


def _unless_null(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """The tombstone where ``column`` holds a value; NULL stays NULL."""
    return sa.case((column.is_(None), sa.null()), else_=param("tomb", sa.Text()))


class ErasureStatements:
    """The statements of an erasure: every one keyed by the workflow (or a row of it)."""

    def __init__(self) -> None:
        mine = param("workflow", sa.String())
        tomb = param("tomb", sa.Text())
        self.locked = sa.select(wf.c.status, wf.c.error).where(wf.c.id == mine).with_for_update()
        self.children = sa.select(wf.c.id).where(wf.c.parent_id == mine)
        self.workflow = (
            wf.update()
            .where(wf.c.id == mine)
            .values(input=tomb, output=_unless_null(wf.c.output), error=param("error_tomb"))
        )
        self.steps = (
            st.update()
            .where(st.c.workflow_id == mine)
            .values(input=_unless_null(st.c.input), output=_unless_null(st.c.output))
        )
        self.step_errors = sa.select(st.c.step_index, st.c.error).where(
            st.c.workflow_id == mine, st.c.error.is_not(None)
        )
        self.step_error = (
            st.update()
            .where(st.c.workflow_id == mine, st.c.step_index == param("index", sa.Integer()))
            .values(error=param("error_tomb"))
        )
        self.keyed_errors: list[tuple[sa.Select[Any], sa.Update]] = [
            (
                sa.select(table.c.seq, table.c.error).where(
                    table.c.workflow_id == mine, table.c.error.is_not(None)
                ),
                table.update()
                .where(table.c.seq == param("row_seq", sa.BigInteger()))
                .values(error=param("error_tomb")),
            )
            for table in (tr, att, up)
        ]
        self.payloads = [
            msg.update()
            .where(msg.c.workflow_id == mine)
            .values(payload=_unless_null(msg.c.payload)),
            ev.update().where(ev.c.workflow_id == mine).values(value=_unless_null(ev.c.value)),
            stream.update()
            .where(stream.c.workflow_id == mine)
            .values(value=_unless_null(stream.c.value)),
            up.update()
            .where(up.c.workflow_id == mine)
            .values(payload=_unless_null(up.c.payload), reply=_unless_null(up.c.reply)),
        ]
        self.attributes = attrs.delete().where(attrs.c.workflow_id == mine)


class ErasureOperations(SQLStoreBase):
    """The :class:`~durable_core.seams.store.Erasure` capability (mixed into ``SQLStore``)."""

    _erasure_statements: ErasureStatements | None = None

    @property
    def _eq(self) -> ErasureStatements:
        if self._erasure_statements is None:
            self._erasure_statements = ErasureStatements()
        return self._erasure_statements

    async def erase_workflow(self, workflow_id: str) -> int:
        """Replace settled workflow ``workflow_id``'s payloads, and its descendants' (they
        were started with its data), with tombstones and delete their attributes, in one
        transaction; how many values were erased. :class:`WorkflowNotFoundError` without
        such a workflow, :class:`InvalidStateError` (nothing erased) while it or one of its
        descendants has not settled."""
        q, at = self._eq, datetime.now(UTC)
        async with self._transaction("erase_workflow") as session:
            tree, frontier = [workflow_id], [workflow_id]
            while frontier:
                found = [
                    row["id"]
                    for parent in frontier
                    for row in await session.fetch(q.children, {"workflow": parent})
                ]
                tree += found
                frontier = found
            errors: dict[str, str | None] = {}
            for one in tree:
                rows = await session.fetch(q.locked, {"workflow": one})
                if not rows:
                    raise WorkflowNotFoundError(
                        f"no workflow with id {one!r} in {self._description}"
                    )
                status = WorkflowStatus(rows[0]["status"])
                if not status.is_terminal:
                    whose = "" if one == workflow_id else f" (a descendant of {workflow_id})"
                    raise InvalidStateError(
                        f"workflow {one}{whose} is {status.value}: only a succeeded, failed or "
                        "cancelled workflow's payloads are erased (cancel it first)"
                    )
                errors[one] = rows[0]["error"]
            erased = 0
            for one, error in errors.items():
                erased += await self._erase_one(session, one, error, at)
        return erased

    async def _erase_one(
        self, session: Session, workflow_id: str, error: str | None, at: datetime
    ) -> int:
        """Erase one workflow's payloads, in ``session``'s transaction."""
        q = self._eq
        mark = {"workflow": workflow_id, "tomb": tombstone(at)}
        erased = await session.execute(q.workflow, {**mark, "error_tomb": erased_error(error, at)})
        erased += await session.execute(q.steps, mark)
        erased += await self._erase_errors(
            session, q.step_errors, q.step_error, "step_index", "index", mark, at
        )
        for select, update in q.keyed_errors:
            erased += await self._erase_errors(session, select, update, "seq", "row_seq", mark, at)
        for statement in q.payloads:
            erased += await session.execute(statement, mark)
        erased += await session.execute(q.attributes, mark)
        return erased

    @staticmethod
    async def _erase_errors(
        session: Session,
        select: sa.Select[Any],
        update: sa.Update,
        key: str,
        param_name: str,
        mark: dict[str, Any],
        at: datetime,
    ) -> int:
        """Erase each error ``select`` finds, its type kept (one statement a row: a
        workflow has few)."""
        found: Sequence[Any] = await session.fetch(select, mark)
        for row in found:
            await session.execute(
                update, {**mark, param_name: row[key], "error_tomb": erased_error(row["error"], at)}
            )
        return len(found)
