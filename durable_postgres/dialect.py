"""How PostgreSQL spells the shared SQL rules, and the statements only it can run.

The server's clock leases every workflow (workers on several hosts agree on
what "expired" means), ``NOTIFY`` wakes idle workers in the statement that
enqueues, and the claim hands out many rows at once with ``FOR UPDATE SKIP
LOCKED``. The claim and the bulk enqueue are built from the shared rules
(:mod:`durable_core.sql.statements`), so they lease and insert exactly as
every other store does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from types import ModuleType
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.dml import Insert

from durable_core.coltypes import UTCDateTime
from durable_core.records import NewWorkflow
from durable_core.sql import SQLDialect, Statements, const
from durable_core.sql.connector import Params
from durable_core.sql.rows import STEP_FIELDS
from durable_core.sql.statements import (
    CLAIMED_COLUMNS,
    NEW_WORKFLOW_FIELDS,
    att,
    due,
    expired,
    new_workflow,
    param,
    st,
    take_lease,
    wf,
    woken,
)

CHANNEL = "durable_workflows"
"""The ``NOTIFY`` channel that enqueueing signals and idle workers listen on."""
CANCEL_CHANNEL = "durable_cancel"
"""The ``NOTIFY`` channel a cancel announces its workflow's id on, for the worker running it."""


class PostgresDialect(SQLDialect):
    """PostgreSQL 15+: the server's clock, ``ON CONFLICT DO UPDATE``, RETURNING, ``NOTIFY``."""

    name = "postgresql"
    update_returning = True
    sqlalchemy_dialect: ClassVar[ModuleType] = postgresql
    migration_lock_key: ClassVar[int] = 0x64757261626C65

    def now(self) -> sa.ColumnElement[datetime]:
        return sa.func.now()

    def after(self, seconds: str) -> sa.ColumnElement[datetime]:
        return self.seconds_after_now(param(seconds, sa.Float()))

    def bind_clock(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        return params

    @staticmethod
    def seconds_after_now(seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[datetime]:
        """The server's ``now()`` plus ``seconds`` (any float expression)."""
        return sa.func.now() + seconds * sa.literal_column("interval '1 second'", sa.Interval)

    @staticmethod
    def notify() -> sa.ColumnElement[Any]:
        """``pg_notify`` on the workers' channel."""
        return sa.func.pg_notify(const(CHANNEL), const(""))

    def wake_workers(self, statement: sa.Update | Insert) -> sa.Executable:
        return statement.returning(self.notify())

    def announce_cancel(self, statement: sa.Update) -> sa.Executable:
        return statement.returning(sa.func.pg_notify(const(CANCEL_CHANNEL), wf.c.id))

    @contextlib.contextmanager
    def migration_lock(self, conn: sa.Connection) -> Iterator[None]:
        # Released when the upgrade's transaction ends.
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(self.migration_lock_key)))
        yield


class PostgresStatements(Statements):
    """The shared statements, plus the claim; enqueueing is one statement for any batch."""

    def __init__(self, dialect: PostgresDialect | None = None) -> None:
        super().__init__(dialect or PostgresDialect())
        self.claim = self._claim()
        self.next_due = self._next_due()

    def inline_steps(self, workflow_id: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The cached steps of ``workflow_id`` as one JSON array of arrays (NULL when none)."""
        row = sa.func.json_build_array(*(st.c[name] for name in STEP_FIELDS))
        return (
            sa.select(sa.func.json_agg(postgresql.aggregate_order_by(row, st.c.step_index)))
            .where(st.c.workflow_id == workflow_id)
            .correlate_except(st)
            .scalar_subquery()
        )

    enqueue_returns_ids = True

    def _build_enqueue(self) -> sa.Executable:
        # Every row of the batch comes from one unnest() of parallel arrays; an id that
        # exists already is skipped. The statement returns the ids it inserted, and
        # pg_notify runs once, in the same statement, when there are any.
        arrays = sa.func.unnest(
            param("ids", postgresql.ARRAY(sa.Text())),
            param("names", postgresql.ARRAY(sa.Text())),
            param("inputs", postgresql.ARRAY(sa.Text())),
            param("max_attempts", postgresql.ARRAY(sa.Integer())),
            param("parents", postgresql.ARRAY(sa.Text())),
            param("delays", postgresql.ARRAY(sa.Float())),
            param("timeouts", postgresql.ARRAY(sa.Float())),
        )
        rows = arrays.table_valued(*NEW_WORKFLOW_FIELDS, "delay", "timeout").render_derived(
            name="u"
        )
        values = new_workflow(
            {name: rows.c[name] for name in NEW_WORKFLOW_FIELDS},
            now=sa.func.now(),
            run_at=PostgresDialect.seconds_after_now(rows.c.delay),
            deadline=PostgresDialect.seconds_after_now(rows.c.timeout),
        )
        inserted = (
            postgresql.insert(wf)
            .from_select(list(values), sa.select(*values.values()).select_from(rows))
            .on_conflict_do_nothing(index_elements=[wf.c.id])
            .returning(wf.c.id)
            .cte("ins")
        )
        count = sa.func.count()
        notify = sa.case((count > const(0), PostgresDialect.notify()), else_=sa.null())
        return sa.select(
            sa.func.array_agg(inserted.c.id).label("ids"), notify.label("notified")
        ).select_from(inserted)

    def enqueue_params(self, rows: Sequence[NewWorkflow]) -> list[Params]:
        return [
            {
                "ids": [row.id for row in rows],
                "names": [row.name for row in rows],
                "inputs": [row.input for row in rows],
                "max_attempts": [row.max_attempts for row in rows],
                "parents": [row.parent_id for row in rows],
                "delays": [float(row.delay_seconds) for row in rows],
                "timeouts": [row.timeout_seconds for row in rows],
            }
        ]

    def recorded(self, settle: sa.Update) -> sa.Executable:
        ended = settle.returning(wf.c.id).cte("ended")
        history = sa.select(
            ended.c.id,
            param("attempt_no", sa.Integer()),
            param("worker_name", sa.String()),
            param("started", UTCDateTime()),
            sa.func.now(),
            param("ended_as", sa.String()),
            param("error_json", sa.Text()),
        )
        columns = ["workflow_id", "attempt", "worker", "started_at", "ended_at", "outcome"]
        return att.insert().from_select([*columns, "error"], history).add_cte(ended)

    def _existing(self) -> sa.Select[Any]:
        ids = param("ids", postgresql.ARRAY(sa.Text()))
        return sa.select(wf.c.id, wf.c.name, wf.c.input, wf.c.parent_id).where(
            wf.c.id == sa.func.any(ids)
        )

    def _next_due(self) -> sa.Executable:
        """Seconds until the next pending or waiting workflow falls due (NULL: none
        scheduled): one index probe per status."""

        def first(status: str) -> sa.ScalarSelect[Any]:
            return (
                sa.select(sa.func.min(wf.c.run_at))
                .where(wf.c.status == const(status), wf.c.run_at > sa.func.now())
                .scalar_subquery()
            )

        soonest = sa.func.least(first("pending"), first("waiting"))
        return sa.select(sa.func.extract("epoch", soonest - sa.func.now()).label("seconds"))

    def _claim(self) -> sa.Executable:
        # Expired leases first, then due pending rows and waiting rows whose deadline
        # passed: ordered, limited, locked index scans (no OR), so the cost grows
        # neither with the backlog nor with the number of waiting workflows.
        d = self.dialect
        limit = param("limit", sa.Integer())

        def scan(runnable: sa.ColumnElement[bool], order: sa.Column[Any], name: str) -> Any:
            return (
                sa.select(wf.c.id, wf.c.locked_by, wf.c.locked_until)
                .where(runnable)
                .order_by(order)
                .limit(limit)
                .with_for_update(skip_locked=True)
                .subquery(name)
            )

        def scan_at(runnable: sa.ColumnElement[bool], name: str) -> Any:
            return (
                sa.select(wf.c.id, wf.c.run_at)
                .where(runnable)
                .order_by(wf.c.run_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
                .subquery(name)
            )

        stale = scan(expired(d), wf.c.locked_until, "expired")
        # Due pending rows and waiting rows whose deadline passed, merged in run_at order
        # (a sort of at most 2 * limit rows): a sleep that ended is not starved by newer work.
        ready, awake = scan_at(due(d), "due"), scan_at(woken(d), "woken")
        timely = sa.union_all(
            sa.select(ready.c.id, ready.c.run_at), sa.select(awake.c.id, awake.c.run_at)
        ).subquery("timely")
        in_order = sa.select(timely.c.id).order_by(timely.c.run_at).limit(limit).subquery("next")
        # An expired lease's holder is returned too: that attempt ended in a crash.
        nothing = sa.null()
        candidates = sa.union_all(
            sa.select(stale.c.id, stale.c.locked_by, stale.c.locked_until),
            sa.select(
                in_order.c.id,
                sa.cast(nothing, sa.String()),
                sa.cast(nothing, UTCDateTime()),
            ),
        ).subquery("candidates")
        picked = sa.select(candidates).limit(limit).cte("picked").prefix_with("MATERIALIZED")
        token = sa.cast(sa.func.gen_random_uuid(), sa.String)
        claimed = (
            wf.update()
            .where(wf.c.id == picked.c.id)
            .values(take_lease(d, token))
            .returning(
                *CLAIMED_COLUMNS,
                picked.c.locked_by.label("crashed_worker"),
                picked.c.locked_until.label("crashed_at"),
            )
            .cte("claimed")
        )
        return sa.select(
            *(claimed.c[column.name] for column in CLAIMED_COLUMNS),
            claimed.c.crashed_worker,
            claimed.c.crashed_at,
            self.inline_steps(claimed.c.id).label("steps"),
        )
