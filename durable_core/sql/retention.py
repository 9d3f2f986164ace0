"""Pruning settled workflows (part of ``SQLStore``): the rule of what a prune removes, written
once for every SQL backend.

A prune removes a settled workflow (succeeded, failed or cancelled) and every row that
belongs to it: the rows of every table whose ``workflow_id`` references ``workflows.id``
(:data:`OWNED`, read from the schema, so a table added later is pruned too). Never a
workflow that is pending, running or waiting, nor one whose parent has not settled (the
parent may still read its result), nor one with a child that has not settled (the child
would wake it). A batch is one transaction: it locks its workflows' rows with ``FOR
UPDATE SKIP LOCKED`` (a row another transaction holds is left for the next batch, so a
prune never waits on a claim or a settle) and deletes their rows table by table,
counting each. One prune runs at a time (:meth:`SQLDialect.prune_turn`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..seams.records import WorkflowStatus
from ..seams.retention import PruneFilter
from . import schema
from .base import SQLStoreBase
from .coltypes import UTCDateTime
from .connector import Params
from .dialect import SQLDialect, const
from .rules import param

wf = schema.workflows

OWNED: tuple[sa.Table, ...] = tuple(
    table
    for table in schema.metadata.sorted_tables
    if any(key.column is wf.c.id for key in table.foreign_keys)
)
"""Every table whose rows belong to a workflow (its ``workflow_id`` references it)."""

UNFINISHED = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.WAITING)

_Shape = tuple[tuple[WorkflowStatus, ...], bool, bool, bool]


def _unsettled(status: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    return status.in_([const(s.value) for s in UNFINISHED])


def _params(which: PruneFilter) -> Params:
    return {
        "before": which.before,
        "names": list(which.names),
        "queues": list(which.queues),
        "except_names": list(which.except_names),
    }


class PruneStatements:
    """The statements of one shape of :class:`PruneFilter` (its statuses, and which of its
    lists are given)."""

    def __init__(self, dialect: SQLDialect, shape: _Shape) -> None:
        statuses, names, queues, excepted = shape
        parent, child = wf.alias("parent"), wf.alias("child")
        chosen: list[sa.ColumnElement[bool]] = [wf.c.status.in_([const(s.value) for s in statuses])]
        if names:
            chosen.append(dialect.one_of(wf.c.name, "names"))
        if queues:
            chosen.append(dialect.one_of(wf.c.queue, "queues"))
        if excepted:
            chosen.append(sa.not_(dialect.one_of(wf.c.name, "except_names")))
        self.newest = (
            sa.select(wf.c.completed_at)
            .where(*chosen, wf.c.completed_at.is_not(None))
            .order_by(wf.c.completed_at.desc())
            .limit(1)
            .offset(param("skip", sa.Integer()))
        )
        prunable = [
            *chosen,
            wf.c.completed_at < param("before", UTCDateTime()),
            ~sa.exists().where(parent.c.id == wf.c.parent_id, _unsettled(parent.c.status)),
            ~sa.exists().where(child.c.parent_id == wf.c.id, _unsettled(child.c.status)),
        ]
        self.batch = (
            sa.select(wf.c.id)
            .where(*prunable)
            .order_by(wf.c.completed_at)
            .limit(param("limit", sa.Integer()))
            .with_for_update(skip_locked=True)
        )
        ids = sa.select(wf.c.id).where(*prunable).scalar_subquery()
        count = sa.func.count().label("n")
        self.counts = [
            (table.name, sa.select(count).select_from(table).where(table.c.workflow_id.in_(ids)))
            for table in OWNED
        ]
        self.counts.append((wf.name, sa.select(count).select_from(wf).where(*prunable)))
        self.deletes = [
            (table.name, table.delete().where(dialect.one_of(table.c.workflow_id, "ids")))
            for table in OWNED
        ]
        settled = wf.c.status.in_([const(s.value) for s in statuses])
        self.deletes.append((wf.name, wf.delete().where(dialect.one_of(wf.c.id, "ids"), settled)))


class PruningOperations(SQLStoreBase):
    """The :class:`~durable_core.seams.retention.Pruning` capability (mixed into ``SQLStore``)."""

    _prune_statements: dict[_Shape, PruneStatements] | None = None

    def _pq(self, which: PruneFilter) -> PruneStatements:
        if self._prune_statements is None:
            self._prune_statements = {}
        shape = (
            tuple(sorted(which.statuses)),
            bool(which.names),
            bool(which.queues),
            bool(which.except_names),
        )
        found = self._prune_statements.get(shape)
        if found is None:
            found = self._prune_statements[shape] = PruneStatements(self.dialect, shape)
        return found

    async def prune_workflows(
        self, which: PruneFilter, *, limit: int, wait: bool = True
    ) -> dict[str, int] | None:
        """Remove at most ``limit`` of the settled workflows ``which`` selects (the oldest
        first) and every row of theirs, in one transaction; the rows removed, per table.
        Without ``wait``, ``None`` (nothing done) while another prune holds its turn."""
        q, turn = self._pq(which), self.dialect.prune_turn(wait=wait)
        removed = {name: 0 for name, _ in q.deletes}
        async with self._transaction("prune_workflows") as session:
            if turn is not None:
                [row] = await session.fetch(turn)
                if not row["turn"]:
                    return None
            found = await session.fetch(q.batch, {**_params(which), "limit": limit})
            ids = [row["id"] for row in found]
            if not ids:
                return removed
            for name, statement in q.deletes:
                removed[name] = await session.execute(statement, {"ids": ids})
        return removed

    async def count_prunable(self, which: PruneFilter) -> dict[str, int]:
        """What :meth:`prune_workflows` would remove of ``which``, with no limit, per table."""
        q, params = self._pq(which), _params(which)
        counted: dict[str, int] = {}
        async with self._transaction("count_prunable") as session:
            for name, statement in q.counts:
                [row] = await session.fetch(statement, params)
                counted[name] = int(row["n"])
        return counted

    async def newest_kept(self, which: PruneFilter, count: int) -> datetime | None:
        """When the ``count``-th newest of ``which``'s workflows ended (``before``
        ignored); ``None`` when there are not that many."""
        q = self._pq(which)
        found = await self._fetch("newest_kept", q.newest, {**_params(which), "skip": count - 1})
        return found[0]["completed_at"] if found else None
