"""Debounce windows in the shared SQL store (the ``workflow_debounces`` table, schema 10).

A debounced start runs in one transaction that first writes: it enqueues its own row
(delayed by the window), then inserts the key's window row unless it exists and locks
it. The key's first start thus owns the window; a later one finds the window's run and,
while that run has not started, gives it the new input and pushes its ``run_at`` back
(capped at ``last_at``), dropping its own row. A run a worker has claimed is no longer
changed: the next start opens a new window. Two processes debouncing one key wait on
the window row's lock, so they agree on one run.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..seams.records import NewWorkflow
from . import schema
from .base import SQLStoreBase
from .coltypes import UTCDateTime
from .dialect import SQLDialect
from .rules import PENDING, param, wf

db = schema.workflow_debounces


def not_started() -> sa.ColumnElement[bool]:
    """The rule of a debounced run whose input may still change: pending, never leased."""
    return sa.and_(wf.c.status == PENDING, wf.c.started_at.is_(None))


def capped(dialect: SQLDialect) -> sa.ColumnElement[Any]:
    """When a window's run fires after one more start: ``window_seconds`` from now, but
    not after the window's ``last_at`` (a parameter; NULL: no cap)."""
    later = dialect.after("window_seconds")
    cap = param("cap", UTCDateTime())
    return sa.case((sa.and_(cap.is_not(None), cap < later), cap), else_=later)


class DebounceStatements:
    """Every statement on ``workflow_debounces``, built once for one dialect."""

    def __init__(self, dialect: SQLDialect) -> None:
        now = dialect.now()
        this = sa.and_(db.c.name == param("wf_name"), db.c.debounce_key == param("key"))
        self.open = dialect.ignore_duplicates(
            dialect.insert(db).values(
                name=param("wf_name"),
                debounce_key=param("key"),
                workflow_id=param("workflow"),
                fire_at=dialect.after("window_seconds"),
                first_at=now,
                last_at=dialect.after("max_wait_seconds"),
            ),
            [db.c.name, db.c.debounce_key],
        )
        self.window = sa.select(db.c.workflow_id, db.c.last_at).where(this).with_for_update()
        self.replace = (
            wf.update()
            .where(wf.c.id == param("run"), not_started())
            .values(input=param("wf_input"), run_at=capped(dialect), updated_at=now)
        )
        self.run_at = sa.select(wf.c.run_at).where(wf.c.id == param("run"))
        self.push = db.update().where(this).values(fire_at=param("fire", UTCDateTime()))
        self.drop = wf.delete().where(wf.c.id == param("workflow"))
        self.reopen = (
            db.update()
            .where(this)
            .values(
                workflow_id=param("workflow"),
                fire_at=dialect.after("window_seconds"),
                first_at=now,
                last_at=dialect.after("max_wait_seconds"),
            )
        )


class DebounceOperations(SQLStoreBase):
    """Debounce starts (mixed into ``SQLStore``): the :class:`~durable_core.seams.store.Debouncer`
    role."""

    _debounce_statements: DebounceStatements | None = None

    @property
    def _dbq(self) -> DebounceStatements:
        if self._debounce_statements is None:
            self._debounce_statements = DebounceStatements(self.dialect)
        return self._debounce_statements

    async def debounce(
        self,
        workflow: NewWorkflow,
        key: str,
        window_seconds: float,
        max_wait_seconds: float | None,
    ) -> tuple[str, bool]:
        """See :meth:`~durable_core.seams.store.Debouncer.debounce`."""
        await self.check_values(f"debounced start of workflow {workflow.id}", workflow.input)
        first = (
            window_seconds if max_wait_seconds is None else min(window_seconds, max_wait_seconds)
        )
        delayed = replace(workflow, delay_seconds=first)
        dq, bind = self._dbq, self.dialect.bind_clock
        window = {
            "wf_name": workflow.name,
            "key": key,
            "workflow": workflow.id,
            "window_seconds": first,
            "max_wait_seconds": max_wait_seconds,
        }
        async with self._transaction("debounce") as session:
            # Writes first: on SQLite the transaction holds the write lock from here on.
            await self._enqueue_in(session, [delayed])
            await session.execute(dq.open, bind(window))
            [found] = await session.fetch(dq.window, window)
            run: str = found["workflow_id"]
            if run == workflow.id:
                return run, True
            cap: datetime | None = found["last_at"]
            changed = {"run": run, "wf_input": workflow.input, "cap": cap}
            if await session.execute(
                dq.replace, bind({**changed, "window_seconds": window_seconds})
            ):
                await session.execute(dq.drop, {"workflow": workflow.id})
                [moved] = await session.fetch(dq.run_at, {"run": run})
                await session.execute(dq.push, {**window, "fire": moved["run_at"]})
                return run, False
            # The window's run has started (or is gone): this start opens the next window.
            await session.execute(dq.reopen, bind(window))
            return workflow.id, True


__all__ = ["DebounceOperations", "DebounceStatements", "capped", "not_started"]
