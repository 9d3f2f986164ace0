"""The rules about a workflow row, each written once as SQLAlchemy Core.

Fencing, leasing, settling, the attempt's history row and the step row's upsert are
expressed here and nowhere else. The single-row statements
(:mod:`durable_core.sql.statements`) apply them to named parameters; a batched
statement (PostgreSQL's group-commit flush, ``durable_postgres.flush``) applies the
same rules to the columns of its parallel arrays. A
:class:`~durable_core.sql.dialect.SQLDialect` only supplies how its database spells
the clock and an upsert.

Parameters are named: ``workflow`` and ``token`` identify a lease,
``lease_seconds`` / ``delay_seconds`` are durations from the database's now.
No parameter shares a column's name (SQLAlchemy reserves those in UPDATEs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ..seams.records import StepStatus, WorkflowStatus
from . import schema
from .dialect import SQLDialect, const

wf = schema.workflows
st = schema.workflow_steps
att = schema.workflow_attempts
tr = schema.workflow_step_tries

PENDING, RUNNING = const(WorkflowStatus.PENDING.value), const(WorkflowStatus.RUNNING.value)
WAITING = const(WorkflowStatus.WAITING.value)

Value = sa.ColumnElement[Any]


def param(name: str, type_: sa.types.TypeEngine[Any] | None = None) -> sa.BindParameter[Any]:
    """A named statement parameter."""
    return sa.bindparam(name, type_=type_)


def status_in(statuses: Sequence[WorkflowStatus]) -> sa.ColumnElement[bool]:
    """The workflow's status is one of ``statuses``."""
    return wf.c.status.in_([const(s.value) for s in statuses])


# -- fencing and leasing -----------------------------------------------------------------------


def holds(workflow: Value | None = None, token: Value | None = None) -> sa.ColumnElement[bool]:
    """Fencing: the workflow is still held by the lease ``workflow`` / ``token`` (by
    default the parameters of those names)."""
    workflow = param("workflow") if workflow is None else workflow
    token = param("token") if token is None else token
    return sa.and_(wf.c.id == workflow, wf.c.lock_token == token)


def due(dialect: SQLDialect) -> sa.ColumnElement[bool]:
    """Pending, and its time has come."""
    return sa.and_(wf.c.status == PENDING, wf.c.run_at <= dialect.now())


def expired(dialect: SQLDialect) -> sa.ColumnElement[bool]:
    """Running under a lease that has run out (or that :func:`end_lease` ended): its worker
    is gone, anyone may take it."""
    return sa.and_(wf.c.status == RUNNING, wf.c.locked_until < dialect.now())


def leased_to(dialect: SQLDialect, worker: Value) -> sa.ColumnElement[bool]:
    """Running under a lease of ``worker`` that has not run out yet."""
    return sa.and_(
        wf.c.status == RUNNING, wf.c.locked_by == worker, wf.c.locked_until > dialect.now()
    )


def end_lease(dialect: SQLDialect) -> dict[str, Any]:
    """What ending a lease early writes (its worker is known dead): it runs out now, so
    :func:`expired` holds and the next claim takes the workflow over with one more
    attempt, as it takes over any expired lease. The token is kept: fencing refuses the
    old holder's writes from that claim on, as ever."""
    return {"locked_until": dialect.now(), "updated_at": dialect.now()}


def woken(dialect: SQLDialect) -> sa.ColumnElement[bool]:
    """Waiting, and its deadline has passed: the sleep is over, the receive timed out."""
    return sa.and_(wf.c.status == WAITING, wf.c.run_at <= dialect.now())


def take_lease(dialect: SQLDialect, token: Value) -> dict[str, Any]:
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
    source: Mapping[str, Value], *, now: Value, run_at: Value, deadline: Value
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


# -- settling ----------------------------------------------------------------------------------


def settle(
    dialect: SQLDialect,
    *,
    status: Value,
    output: Value,
    error: Value,
    retry: bool | sa.ColumnElement[bool],
    retry_at: Value | None = None,
) -> dict[str, Any]:
    """What ending an attempt (fenced by :func:`holds`) writes: its outcome, and the lease
    released. A retry (``status`` pending) is due at ``retry_at`` and keeps its
    ``completed_at``; a final status completes now and keeps its ``run_at``. ``retry``
    is that choice, or a condition deciding it row by row."""
    now = dialect.now()
    values: dict[str, Any] = {"status": status, "output": output, "error": error}
    if retry is True:
        values["run_at"] = retry_at
    elif retry is False:
        values["completed_at"] = now
    else:
        values["run_at"] = sa.case((retry, retry_at), else_=wf.c.run_at)
        values["completed_at"] = sa.case((retry, wf.c.completed_at), else_=now)
    return {**values, **release(dialect)}


ATTEMPT_ROW = ("workflow_id", "attempt", "worker", "started_at", "ended_at", "outcome", "error")
"""The columns of an ended attempt's history row (:func:`attempt_row`'s order)."""


def attempt_row(
    *,
    workflow: Value,
    attempt: Value,
    worker: Value,
    started: Value,
    ended: Value,
    outcome: Value,
    error: Value,
) -> list[Value]:
    """The ``workflow_attempts`` row of an ended attempt, in :data:`ATTEMPT_ROW` order: one
    per ended attempt, written in the transaction that ends it."""
    return [workflow, attempt, worker, started, ended, outcome, error]


def record_attempt(rows: sa.Select[Any]) -> sa.Insert:
    """Insert ``rows`` (:func:`attempt_row`'s columns) as attempt history rows."""
    return att.insert().from_select(list(ATTEMPT_ROW), rows)


# -- step rows ---------------------------------------------------------------------------------

STEP_ROW = (
    "workflow_id",
    "step_index",
    "step_name",
    "status",
    "input",
    "output",
    "error",
    "attempts",
    "started_at",
    "completed_at",
    "path",
)
"""The columns a step write inserts (:func:`step_row`'s order)."""


def step_row(
    *,
    workflow: Value,
    index: Value,
    name: Value,
    status: Value,
    input: Value,
    output: Value,
    error: Value,
    started: Value,
    completed: Value,
    path: Value,
) -> list[Value]:
    """A step row as a step write inserts it, in :data:`STEP_ROW` order (its first try)."""
    return [workflow, index, name, status, input, output, error, const(1), started, completed, path]


def put_step(
    dialect: SQLDialect, rows: sa.Select[Any], *, new_try: bool, keep_error: bool = False
) -> sa.Executable:
    """Insert ``rows`` (:func:`step_row`'s, fenced by whoever selects them: the workflow
    row read FOR SHARE under :func:`holds`, so a concurrent reclaim either committed
    first or waits) as step rows, or reset the existing row of each.

    ``new_try`` counts one more try on an existing row and starts it again; otherwise
    the row keeps its tries and its start (a try's end, a wait's end). ``keep_error``
    keeps the row's last error (a step waiting out a retry)."""
    insert = dialect.insert(st).from_select(list(STEP_ROW), rows)
    return dialect.upsert(
        insert,
        [st.c.workflow_id, st.c.step_index],
        lambda new: {
            "step_name": new("step_name"),
            "status": new("status"),
            "input": new("input"),
            "output": new("output"),
            "error": st.c.error if keep_error else new("error"),
            "attempts": st.c.attempts + const(1) if new_try else st.c.attempts,
            "started_at": new("started_at") if new_try else st.c.started_at,
            "completed_at": new("completed_at"),
            "path": new("path"),
        },
    )


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
