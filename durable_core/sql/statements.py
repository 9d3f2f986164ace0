"""The rules about a workflow row, each written once as SQLAlchemy Core.

Leasing, fencing, settling, retrying and cancelling are expressed here and
nowhere else; a :class:`~durable_core.sql.dialect.SQLDialect` only supplies
how its database spells the clock and an upsert. :class:`Statements` builds
every statement once per store, so a connector can compile each one once.

Parameters are named: ``workflow`` and ``token`` identify a lease,
``lease_seconds`` / ``delay_seconds`` are durations from the database's now.
No parameter shares a column's name (SQLAlchemy reserves those in UPDATEs).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ..seams.records import ANY_WAIT, NewWorkflow, StepStatus, WorkflowStatus
from . import schema
from .coltypes import UTCDateTime
from .connector import Params
from .dialect import SQLDialect, const
from .rows import STEP_FIELDS

wf = schema.workflows
st = schema.workflow_steps
msg = schema.workflow_messages
ev = schema.workflow_events
att = schema.workflow_attempts
tr = schema.workflow_step_tries

PENDING, RUNNING = const(WorkflowStatus.PENDING.value), const(WorkflowStatus.RUNNING.value)
WAITING = const(WorkflowStatus.WAITING.value)
RETRYABLE = (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)
CANCELLABLE = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.WAITING)
TERMINAL = (WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)
CLAIMED_COLUMNS = (
    wf.c.id,
    wf.c.name,
    wf.c.input,
    wf.c.attempts,
    wf.c.max_attempts,
    wf.c.lock_token,
    wf.c.parent_id,
    wf.c.deadline,
    wf.c.queue,
    wf.c.headers,
    wf.c.run_at,
)
NEW_WORKFLOW_FIELDS = (
    "id",
    "name",
    "input",
    "max_attempts",
    "parent_id",
    "queue",
    "priority",
    "concurrency_key",
    "headers",
)
"""The columns a new row copies from its :class:`NewWorkflow` (see :func:`new_workflow_values`)."""


def new_workflow_values(row: NewWorkflow) -> dict[str, Any]:
    """``row``'s values for :data:`NEW_WORKFLOW_FIELDS` and its delay and timeout."""
    values = {name: getattr(row, name) for name in NEW_WORKFLOW_FIELDS}
    values["headers"] = None if row.headers is None else json.dumps(dict(row.headers))
    values["delay_seconds"] = float(row.delay_seconds)
    values["timeout_seconds"] = row.timeout_seconds
    return values


def param(name: str, type_: sa.types.TypeEngine[Any] | None = None) -> sa.BindParameter[Any]:
    """A named statement parameter."""
    return sa.bindparam(name, type_=type_)


def status_in(statuses: Sequence[WorkflowStatus]) -> sa.ColumnElement[bool]:
    return wf.c.status.in_([const(s.value) for s in statuses])


# -- the rules ---------------------------------------------------------------------------------


def holds() -> sa.ColumnElement[bool]:
    """Fencing: the workflow is still held by the lease ``workflow`` / ``token``."""
    return sa.and_(wf.c.id == param("workflow"), wf.c.lock_token == param("token"))


def due(dialect: SQLDialect) -> sa.ColumnElement[bool]:
    """Pending, and its time has come."""
    return sa.and_(wf.c.status == PENDING, wf.c.run_at <= dialect.now())


def expired(dialect: SQLDialect) -> sa.ColumnElement[bool]:
    """Running under a lease that has run out: its worker is gone, anyone may take it."""
    return sa.and_(wf.c.status == RUNNING, wf.c.locked_until < dialect.now())


def woken(dialect: SQLDialect) -> sa.ColumnElement[bool]:
    """Waiting, and its deadline has passed: the sleep is over, the receive timed out."""
    return sa.and_(wf.c.status == WAITING, wf.c.run_at <= dialect.now())


def take_lease(dialect: SQLDialect, token: sa.ColumnElement[Any]) -> dict[str, Any]:
    """What leasing a workflow to ``worker`` writes: each lease is one more attempt."""
    return {
        "status": RUNNING,
        "attempts": wf.c.attempts + const(1),
        "locked_by": param("worker"),
        "lock_token": token,
        "locked_until": dialect.after("lease_seconds"),
        "waiting_for": sa.null(),
        "started_at": sa.func.coalesce(wf.c.started_at, dialect.now()),
        "updated_at": dialect.now(),
    }


def release(dialect: SQLDialect) -> dict[str, Any]:
    """What ending an attempt writes besides its outcome: nobody holds the workflow."""
    return {
        "locked_by": sa.null(),
        "lock_token": sa.null(),
        "locked_until": sa.null(),
        "updated_at": dialect.now(),
    }


def new_workflow(
    source: Mapping[str, sa.ColumnElement[Any]],
    *,
    now: sa.ColumnElement[Any],
    run_at: sa.ColumnElement[Any],
    deadline: sa.ColumnElement[Any],
) -> dict[str, Any]:
    """The row of a workflow being started, from ``source``'s id, name, input and max_attempts."""
    return {
        "id": source["id"],
        "name": source["name"],
        "status": PENDING,
        "input": source["input"],
        "attempts": const(0),
        "max_attempts": source["max_attempts"],
        "parent_id": source["parent_id"],
        "queue": source["queue"],
        "priority": source["priority"],
        "concurrency_key": source["concurrency_key"],
        "headers": source["headers"],
        "run_at": run_at,
        "deadline": deadline,
        "created_at": now,
        "updated_at": now,
    }


TRY_SOURCE = ("workflow_id", "step_index", "status", "attempts", "started_at", "completed_at")
"""The step columns :func:`record_tries` reads (besides ``error``): what a statement that
writes failed step rows returns for their tries to be kept."""


def step_try(step: sa.FromClause) -> dict[str, Any]:
    """The ``workflow_step_tries`` row of the try a step row records (``step``: the step
    table, or the :data:`TRY_SOURCE` columns a statement returned): its number is the row's
    ``attempts``."""
    return {
        "workflow_id": step.c.workflow_id,
        "step_index": step.c.step_index,
        "try_number": step.c.attempts,
        "started_at": step.c.started_at,
        "ended_at": step.c.completed_at,
        "error": step.c.error,
    }


def record_tries(step: sa.FromClause, *where: sa.ColumnElement[bool]) -> sa.Insert:
    """Keep the try of each failed step row of ``step`` (filtered by ``where``)."""
    values = step_try(step)
    failed = step.c.status == const(StepStatus.FAILED.value)
    return tr.insert().from_select(list(values), sa.select(*values.values()).where(failed, *where))


def _after_cursor() -> list[sa.ColumnElement[bool]]:
    """Listed after the row ``before`` (newest first): an older row, or as old and a
    smaller id. The first condition alone is the index range; the second settles ties."""
    cursor = wf.alias("cursor")
    created = sa.select(cursor.c.created_at).where(cursor.c.id == param("before"))
    at = created.scalar_subquery()
    return [
        wf.c.created_at <= at,
        sa.or_(wf.c.created_at < at, wf.c.id < param("before")),
    ]


ERROR_PREFIX = '{"type": "'
"""How every error the library records begins (``failures.dump_error``: its type first)."""


def error_type(dialect: SQLDialect) -> sa.ColumnElement[Any]:
    """The type of a row's recorded error (``builtins.KeyError``); NULL when there is none,
    or it was not recorded with a type first."""
    start = len(ERROR_PREFIX)
    recorded = sa.func.substr(wf.c.error, 1, start) == sa.literal(ERROR_PREFIX)
    rest = sa.func.substr(wf.c.error, start + 1)
    return sa.case((recorded, dialect.before_quote(rest)), else_=sa.null())


_LIST_FILTERS: dict[str, Callable[[SQLDialect], list[sa.ColumnElement[bool]]]] = {
    "status": lambda d: [wf.c.status == param("status")],
    "name": lambda d: [wf.c.name == param("name")],
    "queue": lambda d: [wf.c.queue == param("queue_name")],
    "parent_id": lambda d: [wf.c.parent_id == param("parent")],
    "error_type": lambda d: [error_type(d) == param("error_kind")],
    "created_after": lambda d: [wf.c.created_at >= param("created_after", UTCDateTime())],
    "created_before": lambda d: [wf.c.created_at < param("created_before", UTCDateTime())],
    "before": lambda d: _after_cursor(),
}
"""How each filter of ``list_workflows`` is written; the parameter is the filter's value."""

LIST_PARAMS = {"parent_id": "parent", "queue": "queue_name", "error_type": "error_kind"}
"""The parameter of each filter whose name is a column's (or would read as one)."""


def filter_params(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of the filters ``filters`` (by filter name; a status by its value)."""
    return {
        LIST_PARAMS.get(key, key): getattr(value, "value", value) for key, value in filters.items()
    }


class Statements:
    """Every statement of the shared SQL store, built once for one dialect."""

    enqueue_returns_ids = False
    """Whether :attr:`enqueue` is one statement returning the ids it inserted (an ``ids``
    array); otherwise it runs once per row after :attr:`existing` read the taken ids."""

    def __init__(self, dialect: SQLDialect) -> None:
        self.dialect = d = dialect
        now = d.now()
        self.enqueue = self._build_enqueue()
        self.get = sa.select(wf).where(wf.c.id == param("workflow"))
        self.status = sa.select(wf.c.status).where(wf.c.id == param("workflow"))
        self.load_steps = (
            sa.select(*(st.c[name] for name in STEP_FIELDS), st.c.started_at, st.c.completed_at)
            .where(st.c.workflow_id == param("workflow"))
            .order_by(st.c.step_index)
        )
        self._lists: dict[frozenset[str], sa.Select[Any]] = {}
        self.load_step_tries = (
            sa.select(tr.c.step_index, tr.c.try_number, tr.c.started_at)
            .add_columns(tr.c.ended_at, tr.c.error)
            .where(tr.c.workflow_id == param("workflow"))
            .order_by(tr.c.seq)
        )

        # -- throughput: the attempts ended since a cursor, read by the history's key
        self.last_attempt = sa.select(sa.func.max(att.c.seq).label("seq"))
        self.count_ended = (
            sa.select(wf.c.queue, att.c.outcome, sa.func.count().label("n"))
            .select_from(att.join(wf, wf.c.id == att.c.workflow_id))
            .where(
                att.c.seq > param("after", sa.BigInteger()),
                att.c.seq <= param("upto", sa.BigInteger()),
            )
            .group_by(wf.c.queue, att.c.outcome)
        )

        self.retry = d.wake_workers(
            wf.update()
            .where(wf.c.id == param("workflow"), status_in(RETRYABLE))
            .values(
                status=PENDING,
                attempts=const(0),
                run_at=now,
                updated_at=now,
                completed_at=sa.null(),
            )
        )
        self.cancel = d.announce_cancel(
            wf.update()
            .where(wf.c.id == param("workflow"), status_in(CANCELLABLE))
            .values(
                status=const(WorkflowStatus.CANCELLED.value),
                error=param("error_json", sa.Text()),
                completed_at=now,
                waiting_for=sa.null(),
                **release(d),
            )
        )
        self.cancel_steps = (
            st.update()
            .where(
                st.c.workflow_id == param("workflow"),
                st.c.status.in_([const(StepStatus.RUNNING.value), const(StepStatus.WAITING.value)]),
            )
            .values(status=const(StepStatus.CANCELLED.value), completed_at=now)
        )

        # -- forking: the new row is enqueued; its step cache copies the source's successes
        copied = ("workflow_id", *STEP_FIELDS, "started_at", "completed_at")
        self.copy_steps = d.insert(st).from_select(
            list(copied),
            sa.select(param("fork", sa.String()), *(st.c[name] for name in copied[1:])).where(
                st.c.workflow_id == param("workflow"),
                st.c.status == const(StepStatus.SUCCEEDED.value),
                st.c.step_index < param("before", sa.Integer()),
            ),
        )

        self.acquire_due = self._acquire(sa.or_(due(d), woken(d), expired(d)))
        self.acquire_any = self._acquire(sa.or_(wf.c.status.in_([PENDING, WAITING]), expired(d)))
        self.leased = sa.select(*CLAIMED_COLUMNS).where(holds())
        self.prior = (
            sa.select(wf.c.status, wf.c.attempts, wf.c.locked_by, wf.c.locked_until)
            .where(wf.c.id == param("workflow"))
            .with_for_update()
        )

        # -- what is left to do, per queue and name (ix_workflows_route leads with these)
        count = sa.func.count().label("count")
        self.backlog = (
            sa.select(
                wf.c.queue, wf.c.name, wf.c.status, count, sa.func.min(wf.c.run_at).label("oldest")
            )
            .where(wf.c.status.in_([PENDING, RUNNING, WAITING]))
            .group_by(wf.c.status, wf.c.queue, wf.c.name)
            .order_by(wf.c.queue, wf.c.name, wf.c.status)
        )

        # -- attempt history: one row per ended attempt
        self.record_attempt = att.insert().values(
            workflow_id=param("workflow"),
            attempt=param("attempt_no", sa.Integer()),
            worker=param("worker_name"),
            started_at=param("started", UTCDateTime()),
            ended_at=sa.func.coalesce(param("ended", UTCDateTime()), now),
            outcome=param("ended_as"),
            error=param("error_json"),
        )
        self.load_attempts = (
            sa.select(att.c.attempt, att.c.worker, att.c.started_at, att.c.ended_at)
            .add_columns(att.c.outcome, att.c.error)
            .where(att.c.workflow_id == param("workflow"))
            .order_by(att.c.seq)
        )
        self.existing = self._existing()
        self.parent = sa.select(wf.c.parent_id).where(wf.c.id == param("workflow"))
        self.children = sa.select(wf.c.id).where(
            wf.c.parent_id == param("workflow"), status_in(CANCELLABLE)
        )

        # -- waiting: a suspended row is woken by a message, its child, or its deadline
        self.lock = sa.select(wf.c.id).where(wf.c.id == param("workflow")).with_for_update()
        self.suspend = (
            wf.update()
            .where(holds())
            .values(
                status=WAITING,
                # A suspension is not an attempt: the claim that resumes it counts one.
                attempts=wf.c.attempts - const(1),
                run_at=param("wake_at", UTCDateTime()),
                waiting_for=param("waiting_for"),
                **release(d),
            )
        )
        # A row waiting on several waits (any:<n>) wakes on whatever may end one of them:
        # its body, resumed, suspends again if none has ended (a spurious wake costs a replay).
        self.wake = d.wake_workers(
            wf.update()
            .where(
                wf.c.id == param("workflow"),
                wf.c.status == WAITING,
                sa.or_(
                    wf.c.waiting_for == param("waiting_for"),
                    wf.c.waiting_for.like(const(f"{ANY_WAIT}:%")),
                ),
            )
            .values(status=PENDING, run_at=now, waiting_for=sa.null(), updated_at=now)
        )
        self.settled = sa.select(wf.c.id).where(wf.c.id == param("workflow"), status_in(TERMINAL))
        self.next_message = (
            sa.select(msg.c.seq, msg.c.payload)
            .where(
                msg.c.workflow_id == param("workflow"),
                msg.c.topic == param("topic"),
                msg.c.consumed_at.is_(None),
            )
            .order_by(msg.c.seq)
            .limit(const(1))
            .with_for_update()
        )
        self.consume_message = (
            msg.update()
            .where(msg.c.seq == param("message", sa.BigInteger()))
            .values(consumed_at=now)
        )
        # A message id already in the workflow's inbox inserts nothing (a repeated send).
        self.send = d.ignore_duplicates(
            d.insert(msg).values(
                workflow_id=param("workflow"),
                topic=param("topic"),
                message_id=param("message_id"),
                payload=param("payload"),
                sent_at=now,
            ),
            [msg.c.workflow_id, msg.c.message_id],
        )
        self.set_event = self._set_event()
        self.get_event = sa.select(ev.c.value).where(
            ev.c.workflow_id == param("workflow"), ev.c.key == param("key")
        )

        self.start_step = self._put_step(
            const(StepStatus.RUNNING.value), output=sa.null(), completed_at=sa.null(), tries=True
        )
        self.record_step = self._put_step(
            const(StepStatus.SUCCEEDED.value), output=param("output_json"), completed_at=now
        )
        # Written just before the workflow row is updated in the same transaction: the
        # row is locked for update at once, never upgraded from a shared lock.
        self.wait_step = self._put_step(
            const(StepStatus.WAITING.value),
            output=param("output_json"),
            completed_at=sa.null(),
            exclusive=True,
            error=st.c.error,  # a step waiting out a retry keeps its last error
        )
        self.complete_step = self._finish_step(
            status=const(StepStatus.SUCCEEDED.value), output=param("output_json"), error=sa.null()
        )
        self.fail_step = self._finish_step(
            status=const(StepStatus.FAILED.value), error=param("error_json")
        )
        # The failed try's history row, read from the step row fail_step just wrote.
        self.record_try = record_tries(
            st, st.c.workflow_id == param("workflow"), st.c.step_index == param("index")
        )
        self.fail_step_recorded = self.tried(self.fail_step)
        self.heartbeat = (
            wf.update().where(holds()).values(locked_until=d.after("lease_seconds"), updated_at=now)
        )
        self.settle_retry = (
            wf.update()
            .where(holds())
            .values(
                status=PENDING,
                output=param("output_json"),
                error=param("error_json"),
                run_at=d.after("delay_seconds"),
                **release(d),
            )
        )
        self.settle_final = (
            wf.update()
            .where(holds())
            .values(
                status=param("outcome"),
                output=param("output_json"),
                error=param("error_json"),
                completed_at=now,
                **release(d),
            )
        )
        self.settle_retry_recorded = self.recorded(self.settle_retry)
        self.settle_final_recorded = self.recorded(self.settle_final)

    # -- parameters --------------------------------------------------------------------------

    def enqueue_params(self, rows: Sequence[NewWorkflow]) -> list[Params]:
        """The parameter sets of :attr:`enqueue` for ``rows``."""
        return [new_workflow_values(row) for row in rows]

    def list_workflows(self, filters: frozenset[str]) -> sa.Select[Any]:
        """The newest workflows first, filtered by the parameters named in ``filters``:
        ``status``, ``name``, ``queue``, ``parent_id``, ``error_type``, ``created_after``,
        ``created_before`` and ``before`` (the id of the row the page continues after)."""
        query = self._lists.get(filters)
        if query is None:
            query = (
                sa.select(wf)
                .order_by(wf.c.created_at.desc(), wf.c.id.desc())
                .limit(param("limit", sa.Integer()))
            )
            for name in sorted(filters):
                query = query.where(*_LIST_FILTERS[name](self.dialect))
            self._lists[filters] = query
        return query

    def recorded(self, settle: sa.Update) -> sa.Executable | None:
        """``settle`` and the attempt's history row in one statement, where the database can
        (its count is the settled rows); ``None`` runs them in one transaction instead."""
        return None

    def tried(self, fail: sa.Update) -> sa.Executable | None:
        """``fail`` and the failed try's history row in one statement, where the database can
        (its count is the failed rows); ``None`` runs :attr:`record_try` after it in one
        transaction instead."""
        return None

    def inline_steps(self, workflow_id: sa.ColumnElement[Any]) -> sa.ColumnElement[Any] | None:
        """A column holding the cached steps of ``workflow_id`` as JSON, where the database
        can aggregate them in the same statement (read by ``rows.steps_from_json``)."""
        return None

    # -- builders ----------------------------------------------------------------------------

    def _build_enqueue(self) -> sa.Executable:
        """The statement :meth:`enqueue_params` feeds (one row per parameter set here)."""
        d = self.dialect
        source = {name: param(name) for name in NEW_WORKFLOW_FIELDS}
        values = new_workflow(
            source,
            now=d.now(),
            run_at=d.after("delay_seconds"),
            deadline=d.after("timeout_seconds"),
        )
        return d.wake_workers(d.ignore_duplicates(d.insert(wf).values(values), [wf.c.id]))

    def _existing(self) -> sa.Select[Any]:
        """The rows among the ids in the ``ids`` parameter that exist already."""
        ids: sa.BindParameter[str] = sa.bindparam("ids", expanding=True)
        return sa.select(wf.c.id, wf.c.name, wf.c.input, wf.c.parent_id).where(wf.c.id.in_(ids))

    def _set_event(self) -> sa.Executable:
        d = self.dialect
        held = sa.select(
            wf.c.id, param("key", sa.String()), param("value", sa.Text()), d.now()
        ).where(holds())
        insert = d.insert(ev).from_select(["workflow_id", "key", "value", "updated_at"], held)
        return d.upsert(
            insert,
            [ev.c.workflow_id, ev.c.key],
            lambda new: {"value": new("value"), "updated_at": new("updated_at")},
        )

    def _acquire(self, runnable: sa.ColumnElement[bool]) -> sa.Executable:
        update = (
            wf.update()
            .where(wf.c.id == param("workflow"), runnable)
            .values(take_lease(self.dialect, param("token")))
        )
        if not self.dialect.update_returning:
            return update
        steps = self.inline_steps(wf.c.id)
        columns = [*CLAIMED_COLUMNS] + ([] if steps is None else [steps.label("steps")])
        return update.returning(*columns)

    def _put_step(
        self,
        status: sa.ColumnElement[Any],
        *,
        output: sa.ColumnElement[Any],
        completed_at: sa.ColumnElement[Any],
        exclusive: bool = False,
        tries: bool = False,
        error: sa.ColumnElement[Any] | None = None,
    ) -> sa.Executable:
        """Insert or reset the step row ``index`` as ``status``, fenced by the lease.

        ``tries`` counts one more try of the step on an existing row.
        """
        d = self.dialect
        # The workflow row is read FOR SHARE: a concurrent reclaim (FOR UPDATE) either
        # committed first, and the token no longer matches, or waits for this write.
        held = (
            sa.select(
                wf.c.id,
                param("index", sa.Integer()),
                param("step_name", sa.String()),
                status,
                param("input", sa.Text()),
                output,
                const(1),
                d.now(),
                completed_at,
                param("path", sa.String()),
            )
            .where(holds())
            .with_for_update(read=not exclusive)
        )
        columns = ["workflow_id", "step_index", "step_name", "status", "input", "output"]
        insert = d.insert(st).from_select(
            [*columns, "attempts", "started_at", "completed_at", "path"], held
        )
        return d.upsert(
            insert,
            [st.c.workflow_id, st.c.step_index],
            lambda new: {
                "step_name": new("step_name"),
                "status": new("status"),
                "input": new("input"),
                "output": new("output"),
                "error": sa.null() if error is None else error,
                "attempts": st.c.attempts + const(1) if tries else st.c.attempts,
                # A new try starts the row again; ending a wait keeps when it began.
                "started_at": new("started_at") if tries else st.c.started_at,
                "completed_at": new("completed_at"),
                "path": new("path"),
            },
        )

    def _finish_step(self, **values: Any) -> sa.Update:
        held = sa.exists(sa.select(wf.c.id).where(holds()).with_for_update(read=True))
        return (
            st.update()
            .where(
                st.c.workflow_id == param("workflow"),
                st.c.step_index == param("index"),
                held,
            )
            .values(completed_at=self.dialect.now(), **values)
        )


class OperatorStatements:
    """The statements behind an operator's questions: counts and groupings of the workflows
    a filter covers, the ids a bulk action walks, what happened over a window, a page of
    steps. Built once per store, each filtered statement when first used."""

    def __init__(self, dialect: SQLDialect) -> None:
        self.dialect = d = dialect
        self._built: dict[tuple[str, frozenset[str], tuple[str, ...]], sa.Select[Any]] = {}
        self.error_type = error_type(d).label("error_type")
        since = d.after("window_seconds")  # a negative duration: the window's start
        self.ended = (
            sa.select(wf.c.queue, wf.c.status, sa.func.count().label("n"))
            .where(wf.c.completed_at >= since)
            .group_by(wf.c.queue, wf.c.status)
        )
        waited = d.seconds_between(wf.c.created_at, wf.c.started_at)
        self.created = (
            sa.select(
                wf.c.queue,
                sa.func.count().label("created"),
                sa.func.count(wf.c.started_at).label("started"),
                sa.func.avg(waited).label("latency_avg"),
                sa.func.max(waited).label("latency_max"),
            )
            .where(wf.c.created_at >= since)
            .group_by(wf.c.queue)
        )
        self.steps_page = (
            sa.select(*(st.c[name] for name in STEP_FIELDS), st.c.started_at, st.c.completed_at)
            .where(
                st.c.workflow_id == param("workflow"),
                st.c.step_index >= param("first", sa.Integer()),
            )
            .order_by(st.c.step_index)
            .limit(param("limit", sa.Integer()))
        )

    def _where(
        self, query: sa.Select[Any], filters: frozenset[str], statuses: tuple[str, ...]
    ) -> sa.Select[Any]:
        for name in sorted(filters):
            query = query.where(*_LIST_FILTERS[name](self.dialect))
        if statuses:
            query = query.where(status_in([WorkflowStatus(s) for s in statuses]))
        return query

    def _cached(
        self,
        kind: str,
        filters: frozenset[str],
        statuses: tuple[str, ...],
        build: Callable[[], sa.Select[Any]],
    ) -> sa.Select[Any]:
        key = (kind, filters, statuses)
        query = self._built.get(key)
        if query is None:
            query = self._built[key] = self._where(build(), filters, statuses)
        return query

    def count(self, filters: frozenset[str], statuses: tuple[str, ...] = ()) -> sa.Select[Any]:
        """How many workflows the filters (``list_workflows``'s, but ``before``) cover, of
        ``statuses`` only when given."""
        return self._cached(
            "count", filters, statuses, lambda: sa.select(sa.func.count().label("n"))
        )

    def ids(
        self, filters: frozenset[str], statuses: tuple[str, ...], *, lock: bool = False
    ) -> sa.Select[Any]:
        """The ids the filters cover, of ``statuses``, in id order after the id ``after``
        (``""``: from the first), ``limit`` of them; locked for update with ``lock``."""
        select = (
            sa.select(wf.c.id)
            .where(wf.c.id > param("after"))
            .order_by(wf.c.id)
            .limit(param("limit", sa.Integer()))
        )
        if lock:
            return self._cached("locked ids", filters, statuses, select.with_for_update)
        return self._cached("ids", filters, statuses, lambda: select)

    def error_counts(self, filters: frozenset[str]) -> sa.Select[Any]:
        """The workflows the filters cover that recorded an error, counted by name and error
        type, the most frequent first (``limit`` groups)."""
        n = sa.func.count().label("n")
        return self._cached(
            "errors",
            filters,
            (),
            lambda: (
                sa.select(
                    wf.c.name, self.error_type, n, sa.func.max(wf.c.updated_at).label("latest")
                )
                .where(wf.c.error.is_not(None))
                .group_by(wf.c.name, self.error_type)
                .order_by(n.desc(), wf.c.name)
                .limit(param("limit", sa.Integer()))
            ),
        )
