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

from durable_core.definitions.queues import Route
from durable_core.seams.records import NewWorkflow
from durable_core.sql import SQLDialect, Statements, const
from durable_core.sql.coltypes import UTCDateTime
from durable_core.sql.connector import Params
from durable_core.sql.rows import STEP_FIELDS
from durable_core.sql.rules import (
    PENDING,
    TRY_SOURCE,
    WAITING,
    expired,
    new_workflow,
    param,
    record_attempt,
    record_tries,
    st,
    take_lease,
    wf,
)
from durable_core.sql.statements import CLAIMED_COLUMNS, NEW_WORKFLOW_FIELDS, new_workflow_values

from .keyed import keyed_params, keyed_scan
from .quotas import seconds_after_now, within_quotas


def _unbounded(kind: sa.types.TypeEngine[Any]) -> sa.types.TypeEngine[Any]:
    # An array of VARCHAR(n) would truncate an over-long value; the column refuses it.
    return sa.Text() if isinstance(kind, sa.String) else kind


_NEW_ROW_ARRAYS: dict[str, sa.types.TypeEngine[Any]] = {
    **{name: _unbounded(wf.c[name].type) for name in NEW_WORKFLOW_FIELDS},
    "delay_seconds": sa.Float(),
    "timeout_seconds": sa.Float(),
}
"""One array parameter (``<name>s``) per value of :func:`new_workflow_values`."""

CHANNEL = "durable_workflows"
"""The ``NOTIFY`` channel that enqueueing signals and idle workers listen on."""
CANCEL_CHANNEL = "durable_cancel"
"""The ``NOTIFY`` channel a cancel announces its workflow's id on, for the worker running it."""
SCHEDULE_CHANNEL = "durable_schedules"
"""The ``NOTIFY`` channel a schedule's addition or change is announced on, for the schedulers."""
TALK_CHANNEL = "durable_talk"
"""The ``NOTIFY`` channel a stream write or an update's reply announces its workflow's id on,
for the readers and callers waiting on it."""


LIVENESS_LOCKS = 0x64757277
"""The first key of every worker's liveness lock (``pg_advisory_lock(LIVENESS_LOCKS, key)``):
two-key advisory locks are apart from the one-key locks the store takes elsewhere."""

_locks = sa.table(
    "pg_locks",
    sa.column("locktype", sa.Text()),
    sa.column("database", sa.Integer()),
    sa.column("classid", sa.Integer()),
    sa.column("objid", sa.BigInteger()),
    sa.column("objsubid", sa.Integer()),
    sa.column("granted", sa.Boolean()),
)
_databases = sa.table("pg_database", sa.column("oid", sa.Integer()), sa.column("datname"))


class PostgresDialect(SQLDialect):
    """PostgreSQL 15+: the server's clock, ``ON CONFLICT DO UPDATE``, RETURNING, ``NOTIFY``."""

    name = "postgresql"
    update_returning = True
    plan_for_values = "SET LOCAL plan_cache_mode = force_custom_plan"
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
        return seconds_after_now(seconds)

    @staticmethod
    def notify() -> sa.ColumnElement[Any]:
        """``pg_notify`` on the workers' channel."""
        return sa.func.pg_notify(const(CHANNEL), const(""))

    def wake_workers(self, statement: sa.Update | Insert) -> sa.Executable:
        return statement.returning(self.notify())

    def announce_cancel(self, statement: sa.Update) -> sa.Executable:
        return statement.returning(sa.func.pg_notify(const(CANCEL_CHANNEL), wf.c.id))

    def announce_schedules(self, statement: sa.Insert | sa.Update) -> sa.Executable:
        return statement.returning(sa.func.pg_notify(const(SCHEDULE_CHANNEL), const("")))

    def announce_talk(
        self, statement: sa.Insert | sa.Update, workflow_id: sa.ColumnElement[Any]
    ) -> sa.Executable:
        return statement.returning(sa.func.pg_notify(const(TALK_CHANNEL), workflow_id))

    def before_quote(self, text: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.func.split_part(text, sa.literal('"'), 1)

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[Any]:
        return sa.extract("epoch", end - start)

    def session_gone(
        self, key: sa.ColumnElement[Any], epoch: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[bool]:
        """No session holds the liveness lock ``key`` in this database, on a server that
        has not restarted since it was taken (``epoch``: every session ended with a
        restart, the living ones included, which take their locks again). One read of
        ``pg_locks`` per statement, whatever the number of workers."""
        this_database = (
            sa.select(_databases.c.oid)
            .where(_databases.c.datname == sa.func.current_database())
            .scalar_subquery()
        )
        held = sa.select(sa.cast(_locks.c.objid, sa.BigInteger())).where(
            _locks.c.locktype == const("advisory"),
            _locks.c.database == this_database,
            _locks.c.classid == const(LIVENESS_LOCKS),
            _locks.c.objsubid == const(2),
            _locks.c.granted,
        )
        return sa.and_(
            epoch == sa.func.pg_postmaster_start_time(),
            sa.cast(key, sa.BigInteger()).not_in(held),
        )

    @contextlib.contextmanager
    def migration_lock(self, conn: sa.Connection) -> Iterator[None]:
        # Released when the upgrade's transaction ends.
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(self.migration_lock_key)))
        yield

    prune_lock_key: ClassVar[int] = 0x64757261626C66

    def one_of(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        # One statement text for any length of list (statements are prepared once).
        return column == sa.func.any(param(name, postgresql.ARRAY(sa.Text())))

    def prune_turn(self, *, wait: bool) -> sa.Executable | None:
        # A transaction-level lock: it ends with the batch's transaction, also behind a
        # transaction pooler, and never outlives a session that went away.
        key = const(self.prune_lock_key)
        if wait:
            return sa.select(sa.func.pg_advisory_xact_lock(key).is_not(None).label("turn"))
        return sa.select(sa.func.pg_try_advisory_xact_lock(key).label("turn"))


class PostgresStatements(Statements):
    """The shared statements, plus the claim; enqueueing is one statement for any batch."""

    def __init__(self, dialect: PostgresDialect | None = None) -> None:
        super().__init__(dialect or PostgresDialect())
        self.claim = self._claim(quotas=True)
        self.plain_claim = self._claim(quotas=False)
        self.serialized = self.serialize_claims()
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
            *(param(f"{name}s", postgresql.ARRAY(kind)) for name, kind in _NEW_ROW_ARRAYS.items())
        )
        rows = arrays.table_valued(*_NEW_ROW_ARRAYS).render_derived(name="u")
        values = new_workflow(
            {name: rows.c[name] for name in NEW_WORKFLOW_FIELDS},
            now=sa.func.now(),
            run_at=PostgresDialect.seconds_after_now(rows.c.delay_seconds),
            deadline=PostgresDialect.seconds_after_now(rows.c.timeout_seconds),
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
        values = [new_workflow_values(row) for row in rows]
        return [{f"{name}s": [row[name] for row in values] for name in _NEW_ROW_ARRAYS}]

    def recorded(self, settle: sa.Update) -> sa.Executable:
        ended = settle.returning(wf.c.id).cte("ended")
        history = sa.select(*self.attempt_history(ended.c.id, sa.func.now()))
        return record_attempt(history).add_cte(ended)

    def tried(self, fail: sa.Update) -> sa.Executable:
        failed = fail.returning(*(st.c[name] for name in (*TRY_SOURCE, "error"))).cte("failed")
        return record_tries(failed).add_cte(failed)

    def _existing(self) -> sa.Select[Any]:
        ids = param("ids", postgresql.ARRAY(sa.Text()))
        return sa.select(wf.c.id, wf.c.name, wf.c.input, wf.c.parent_id).where(
            wf.c.id == sa.func.any(ids)
        )

    def _within_quotas(self, candidates: Any, order: tuple[Any, ...], limit: Any) -> Any:
        """The claim's rows among ``candidates`` within each served queue's share
        (:func:`~durable_postgres.quotas.within_quotas`)."""
        return within_quotas(candidates, order, limit)

    def claim_params(self, routes: Sequence[Route], key_pivot: str = "") -> Params:
        """The lanes and quotas of :attr:`claim` for ``routes``; a keyed lane's keys are
        walked from after ``key_pivot`` (and from the first)."""
        lanes = [(route.queue.name, name) for route in routes for name in route.names]
        queues = [route.queue for route in routes]
        return {
            "lane_queues": [queue for queue, _ in lanes],
            "lane_names": [name for _, name in lanes],
            "queues": [queue.name for queue in queues],
            "takes": [route.take for route in routes],
            "fleet": [queue.concurrency for queue in queues],
            "rates": [None if q.rate_limit is None else q.rate_limit.limit for q in queues],
            "periods": [None if q.rate_limit is None else q.rate_limit.period for q in queues],
            "key_limits": [queue.key_concurrency for queue in queues],
            **keyed_params(routes, key_pivot),
        }

    def serialize_claims(self) -> sa.Executable:
        """Wait for, and hold to the end of the transaction, each queue's claim lock (in
        name order, so two claimers never wait on each other crosswise)."""
        keys = (
            sa.func.unnest(param("locked_queues", postgresql.ARRAY(sa.Text())))
            .table_valued("queue")
            .render_derived(name="locked")
        )
        lock = sa.func.pg_advisory_xact_lock(
            sa.func.hashtextextended(sa.func.concat(const("durable-queue:"), keys.c.queue), 0)
        )
        return sa.select(sa.func.count(lock)).select_from(keys)

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

    def _claim(self, *, quotas: bool) -> sa.Executable:
        # Routed: a worker claims only the (queue, name) lanes it serves. Each lane's due
        # rows are an ordered, limited, locked scan of ix_workflows_route (no OR, no sort
        # of the backlog), so the cost grows neither with the backlog nor with rows nobody
        # serves nor with the number of waiting workflows. Expired leases come first, then
        # due pending rows and waiting rows whose deadline passed, by priority and run_at.
        limit = param("limit", sa.Integer())
        now = sa.func.now()
        lanes = (
            sa.func.unnest(
                param("lane_queues", postgresql.ARRAY(sa.Text())),
                param("lane_names", postgresql.ARRAY(sa.Text())),
            )
            .table_valued("queue", "name")
            .render_derived(name="lane")
        )
        columns = (wf.c.id, wf.c.queue, wf.c.priority, wf.c.run_at, wf.c.concurrency_key)

        def lane_scan(status: sa.ColumnElement[str], name: str) -> sa.Select[Any]:
            rows = (
                sa.select(*columns)
                .where(
                    wf.c.status == status,
                    wf.c.queue == lanes.c.queue,
                    wf.c.name == lanes.c.name,
                    wf.c.run_at <= now,
                )
                .order_by(wf.c.priority.desc(), wf.c.run_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
                .lateral(name)
            )
            return sa.select(
                *rows.c,
                sa.false().label("stale"),
                sa.cast(sa.null(), sa.String()).label("crashed_worker"),
                sa.cast(sa.null(), UTCDateTime()).label("crashed_at"),
            ).select_from(lanes.join(rows, sa.true()))

        served = sa.select(lanes.c.queue, lanes.c.name)
        stale = (
            sa.select(
                *columns,
                sa.true().label("stale"),
                wf.c.locked_by.label("crashed_worker"),
                wf.c.locked_until.label("crashed_at"),
            )
            .where(expired(self.dialect), sa.tuple_(wf.c.queue, wf.c.name).in_(served))
            .order_by(wf.c.locked_until)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .subquery("expired")
        )
        # Waiting rows whose deadline passed, oldest deadline first: one range scan of
        # ix_workflows_status_run_at, which walks only those (a scan per lane in priority
        # order would walk every waiting row of the lane to find the few that are due).
        woken_rows = (
            sa.select(*columns)
            .where(
                wf.c.status == WAITING,
                wf.c.run_at <= now,
                sa.tuple_(wf.c.queue, wf.c.name).in_(served),
            )
            .order_by(wf.c.run_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .subquery("woken")
        )
        woken = sa.select(
            *woken_rows.c,
            sa.false().label("stale"),
            sa.cast(sa.null(), sa.String()).label("crashed_worker"),
            sa.cast(sa.null(), UTCDateTime()).label("crashed_at"),
        )
        sources = [sa.select(stale), lane_scan(PENDING, "due"), woken]
        if quotas:
            # A keyed lane's rows per key too (a row found twice is one candidate).
            candidates = sa.union(*sources, keyed_scan(columns)).cte("candidates")
        else:
            candidates = sa.union_all(*sources).cte("candidates")
        order = (candidates.c.stale.desc(), candidates.c.priority.desc(), candidates.c.run_at)
        if not quotas:
            # No queue limit and no per-queue share below the limit: the first rows in order.
            picked = (
                sa.select(candidates.c.id, candidates.c.crashed_worker, candidates.c.crashed_at)
                .order_by(*order)
                .limit(limit)
                .cte("picked")
                .prefix_with("MATERIALIZED")
            )
        else:
            picked = self._within_quotas(candidates, order, limit)
        token = sa.cast(sa.func.gen_random_uuid(), sa.String)
        # The picked ids also as an array: the rows are then found by primary key whatever
        # the planner guesses of the picked count (a LIMIT $n is guessed at a tenth of its
        # input, and one lane per name multiplies that into hundreds of rows, which in a
        # generic plan made the update hash-join a scan of the whole table on every claim).
        ids = sa.func.array(sa.select(picked.c.id).scalar_subquery())
        claimed = (
            wf.update()
            .where(wf.c.id == sa.func.any(ids), wf.c.id == picked.c.id)
            .values(take_lease(self.dialect, token))
            .returning(
                *CLAIMED_COLUMNS,
                wf.c.concurrency_key,
                picked.c.crashed_worker,
                picked.c.crashed_at,
            )
            .cte("claimed")
        )
        return sa.select(
            *(claimed.c[column.name] for column in CLAIMED_COLUMNS),
            claimed.c.concurrency_key,
            claimed.c.crashed_worker,
            claimed.c.crashed_at,
            self.inline_steps(claimed.c.id).label("steps"),
        )
