"""The single-row statements of the shared SQL store, built from the rules.

Fencing, leasing, settling, the attempt's history row and the step row's upsert
are :mod:`durable_core.sql.rules`'; retrying, cancelling, waiting and forking are
written here once. :class:`Statements` builds every statement once per store, so
a connector can compile each one once. The listing queries are
:mod:`durable_core.sql.listing`'s.

Parameters are named: ``workflow`` and ``token`` identify a lease,
``lease_seconds`` / ``delay_seconds`` are durations from the database's now.
No parameter shares a column's name (SQLAlchemy reserves those in UPDATEs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..seams.records import ANY_WAIT, NewWorkflow, StepStatus, WorkflowStatus
from . import schema
from .coltypes import UTCDateTime
from .connector import Params
from .dialect import SQLDialect, const
from .listing import list_workflows
from .rows import STEP_FIELDS
from .rules import (
    PENDING,
    RUNNING,
    WAITING,
    att,
    attempt_row,
    due,
    expired,
    holds,
    new_workflow,
    param,
    put_step,
    record_attempt,
    record_tries,
    release,
    settle,
    st,
    status_in,
    step_row,
    take_lease,
    tr,
    wf,
    woken,
)

msg = schema.workflow_messages
ev = schema.workflow_events
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
        self.record_attempt = record_attempt(
            sa.select(
                *self.attempt_history(
                    param("workflow", sa.String()),
                    sa.func.coalesce(param("ended", UTCDateTime()), now),
                )
            )
        )
        self.load_attempts = (
            sa.select(att.c.attempt, att.c.worker, att.c.started_at, att.c.ended_at)
            .add_columns(att.c.outcome, att.c.error)
            .where(att.c.workflow_id == param("workflow"))
            .order_by(att.c.seq)
        )
        self.existing = self._existing()
        self.parent = sa.select(wf.c.parent_id).where(wf.c.id == param("workflow"))
        self.parents = sa.select(wf.c.id, wf.c.parent_id).where(
            wf.c.id.in_([param("workflow"), param("other")])
        )
        self.children = sa.select(wf.c.id).where(
            wf.c.parent_id == param("workflow"), status_in(CANCELLABLE)
        )

        # -- waiting: a suspended row is woken by a message, its child, or its deadline
        self.lock = sa.select(wf.c.id).where(wf.c.id == param("workflow")).with_for_update()
        # Fencing at the start of a transaction that writes an effect: the row, locked until
        # it ends, while the lease holds it (a reclaim committed before, or waits for it).
        self.held = sa.select(wf.c.id).where(holds()).with_for_update()
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
        # A transaction step's try that wrote no running row ends counted as one more try.
        self.record_step_try = self._put_step(
            const(StepStatus.SUCCEEDED.value),
            output=param("output_json"),
            completed_at=now,
            tries=True,
        )
        # Written just before the workflow row is updated in the same transaction: the
        # row is locked for update at once, never upgraded from a shared lock.
        self.wait_step = self._put_step(
            const(StepStatus.WAITING.value),
            output=param("output_json"),
            completed_at=sa.null(),
            exclusive=True,
            keep_error=True,  # a step waiting out a retry keeps its last error
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
                settle(
                    d,
                    status=PENDING,
                    output=param("output_json"),
                    error=param("error_json"),
                    retry=True,
                    retry_at=d.after("delay_seconds"),
                )
            )
        )
        self.settle_final = (
            wf.update()
            .where(holds())
            .values(
                settle(
                    d,
                    status=param("outcome"),
                    output=param("output_json"),
                    error=param("error_json"),
                    retry=False,
                )
            )
        )
        self.settle_retry_recorded = self.recorded(self.settle_retry)
        self.settle_final_recorded = self.recorded(self.settle_final)

    # -- parameters --------------------------------------------------------------------------

    def enqueue_params(self, rows: Sequence[NewWorkflow]) -> list[Params]:
        """The parameter sets of :attr:`enqueue` for ``rows``."""
        return [new_workflow_values(row) for row in rows]

    def list_workflows(self, filters: frozenset[str]) -> sa.Select[Any]:
        """The newest workflows first, filtered by the parameters named in ``filters``
        (:func:`durable_core.sql.listing.list_workflows`), built once per set."""
        query = self._lists.get(filters)
        if query is None:
            query = self._lists[filters] = list_workflows(self.dialect, filters)
        return query

    def attempt_history(
        self, workflow: sa.ColumnElement[Any], ended: sa.ColumnElement[Any]
    ) -> list[sa.ColumnElement[Any]]:
        """The history row of the attempt of ``workflow`` ended at ``ended``, its other
        values the parameters ``attempt_no``, ``worker_name``, ``started``, ``ended_as``
        and ``error_json``."""
        return attempt_row(
            workflow=workflow,
            attempt=param("attempt_no", sa.Integer()),
            worker=param("worker_name", sa.String()),
            started=param("started", UTCDateTime()),
            ended=ended,
            outcome=param("ended_as", sa.String()),
            error=param("error_json", sa.Text()),
        )

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
        keep_error: bool = False,
    ) -> sa.Executable:
        """Insert or reset the step row ``index`` as ``status``, fenced by the lease (the
        workflow row read FOR SHARE, or FOR UPDATE when ``exclusive``).

        ``tries`` counts one more try of the step on an existing row.
        """
        d = self.dialect
        held = (
            sa.select(
                *step_row(
                    workflow=wf.c.id,
                    index=param("index", sa.Integer()),
                    name=param("step_name", sa.String()),
                    status=status,
                    input=param("input", sa.Text()),
                    output=output,
                    error=sa.null(),
                    started=d.now(),
                    completed=completed_at,
                    path=param("path", sa.String()),
                )
            )
            .where(holds())
            .with_for_update(read=not exclusive)
        )
        return put_step(d, held, new_try=tries, keep_error=keep_error)

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
