"""The group-commit flush: the step rows and settlements of many attempts, one statement.

Each write arrives as one element of parallel columns (``unnest``; a text column packed
into one text, see :func:`_column`) and is fenced by its own lease, joined on the
workflow row, so a write whose lease is gone is left out alone and never blocks the
rest. The statement applies the rules of :mod:`durable_core.sql.rules` to those
columns, as the single-row statements apply them to parameters: fencing (``holds``), the
step upsert (``put_step``, a failed try with its history row by ``record_tries``), the
settle (``settle``) and the attempt's history row (``attempt_row``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from durable_core.seams.records import Settlement, StepStatus, StepWrite, settled_outcome
from durable_core.sql import const
from durable_core.sql.coltypes import UTCDateTime
from durable_core.sql.connector import Params, Row
from durable_core.sql.rules import (
    PENDING,
    TRY_SOURCE,
    attempt_row,
    holds,
    param,
    put_step,
    record_attempt,
    record_tries,
    settle,
    st,
    step_row,
    wf,
)

from .dialect import PostgresDialect

_STEP_ARRAYS: dict[str, sa.types.TypeEngine[Any]] = {
    "workflow": sa.Text(),
    "token": sa.Text(),
    "step_index": sa.Integer(),
    "step_name": sa.Text(),
    "status": sa.Text(),
    "input": sa.Text(),
    "output": sa.Text(),
    "error": sa.Text(),
    "new_try": sa.Boolean(),
    "ran": sa.Float(),
    "settling": sa.Boolean(),
    "path": sa.Text(),
}
_SETTLE_ARRAYS: dict[str, sa.types.TypeEngine[Any]] = {
    "workflow": sa.Text(),
    "token": sa.Text(),
    "status": sa.Text(),
    "output": sa.Text(),
    "error": sa.Text(),
    "delay": sa.Float(),
    "attempt_no": sa.Integer(),
    "worker_name": sa.Text(),
    "started": UTCDateTime(),
    "ended_as": sa.Text(),
}
_TEXT = frozenset(
    f"{prefix}_{name}"
    for prefix, arrays in (("s", _STEP_ARRAYS), ("x", _SETTLE_ARRAYS))
    for name, kind in arrays.items()
    if isinstance(kind, sa.Text)
)
"""The parameters sent packed (:func:`_column`)."""
_SECOND = sa.literal_column("interval '1 second'", sa.Interval)


_SEP, _NULL = "\x1f", "\x1e"
"""A packed text column's separator and the element that stands for NULL (ASCII's unit
and record separators)."""
_SEP_SQL, _NULL_SQL = (sa.literal_column(f"chr({ord(c)})", sa.Text) for c in (_SEP, _NULL))


def _column(prefix: str, name: str, kind: sa.types.TypeEngine[Any]) -> Any:
    """One column of the writes: a text column is one text parameter, its elements joined
    by :data:`_SEP`, split back by the server; the ``_array`` parameter holds it instead
    when it cannot be packed (:func:`_packed`). asyncpg encodes an array element by
    element, each text element after two ``isinstance`` checks against abstract classes
    (about 0.3 µs each); a joined text is one ``str.join``."""
    if not isinstance(kind, sa.Text):
        return param(f"{prefix}_{name}", postgresql.ARRAY(kind))
    packed = param(f"{prefix}_{name}", sa.Text())
    split = sa.func.string_to_array(packed, _SEP_SQL, _NULL_SQL)
    return sa.func.coalesce(split, param(f"{prefix}_{name}_array", postgresql.ARRAY(kind)))


def _rows(prefix: str, arrays: dict[str, sa.types.TypeEngine[Any]]) -> Any:
    """The writes of one kind as a table: one parallel array (or packed text) per column."""
    columns = (_column(prefix, name, kind) for name, kind in arrays.items())
    return sa.func.unnest(*columns).table_valued(*arrays).render_derived(name=prefix)


def _packed(values: list[str | None]) -> str | None:
    """``values`` joined by :data:`_SEP`, ``None`` as :data:`_NULL`; ``None`` when that
    would not split back into ``values`` (an element holding the separator, one equal to
    the NULL element, or a lone empty text, which splits into no element; no values at
    all, which the empty array sends as cheaply)."""
    if len(values) == 1:
        [value] = values
        if value is None:
            return _NULL
        return None if _SEP in value or value in ("", _NULL) else value
    if not values or _NULL in values:
        return None
    text = _SEP.join([_NULL if value is None else value for value in values])
    if text.count(_SEP) != len(values) - 1 or text == "":
        return None
    return text


_DIALECT = PostgresDialect()


def _put_steps(new_try: bool, settled: Any = None) -> Any:
    """Insert or update the step rows whose ``new_try`` is ``new_try``: with ``settled``,
    the last steps of the settlements that landed (whose rows the settle locked); without,
    the others, each fenced by its lease (the workflow row read FOR SHARE, as the
    single-row step writes do)."""
    s, now = _rows("s", _STEP_ARRAYS), sa.func.now()
    ended = sa.case((s.c.status == const(StepStatus.RUNNING.value), sa.null()), else_=now)
    tried = s.c.new_try if new_try else sa.not_(s.c.new_try)
    if settled is None:
        held_by = s.join(wf, holds(s.c.workflow, s.c.token))
        which = sa.and_(tried, sa.not_(s.c.settling))
    else:
        held_by = s.join(settled, settled.c.id == s.c.workflow)
        which = sa.and_(tried, s.c.settling)
    row = step_row(
        workflow=s.c.workflow,
        index=s.c.step_index,
        name=s.c.step_name,
        status=s.c.status,
        input=s.c.input,
        output=s.c.output,
        error=s.c.error,
        started=now - s.c.ran * _SECOND,
        completed=ended,
        path=s.c.path,
    )
    held = sa.select(*row).select_from(held_by).where(which)
    if settled is None:
        held = held.with_for_update(read=True, of=wf)
    put: Any = put_step(_DIALECT, held, new_try=new_try)
    name = ("tried" if new_try else "ended_steps") + ("_settled" if settled is not None else "")
    # The rows as written, for the failed tries' history rows (record_tries).
    return put.returning(*(st.c[column] for column in (*TRY_SOURCE, "error"))).cte(name)


def _settle() -> tuple[Any, Any]:
    """End the attempts (retries due after their delay), each fenced by its lease, and
    record each ended attempt's history row: the two CTEs."""
    x = _rows("x", _SETTLE_ARRAYS)
    settled = (
        wf.update()
        .where(holds(x.c.workflow, x.c.token))
        .values(
            settle(
                _DIALECT,
                status=x.c.status,
                output=x.c.output,
                error=x.c.error,
                retry=x.c.status == PENDING,
                retry_at=PostgresDialect.seconds_after_now(x.c.delay),
            )
        )
        .returning(wf.c.id)
        .cte("settled")
    )
    h = _rows("x", _SETTLE_ARRAYS)
    history = sa.select(
        *attempt_row(
            workflow=h.c.workflow,
            attempt=h.c.attempt_no,
            worker=h.c.worker_name,
            started=h.c.started,
            ended=sa.func.now(),
            outcome=h.c.ended_as,
            error=h.c.error,
        )
    ).select_from(h.join(settled, settled.c.id == h.c.workflow))
    return settled, record_attempt(history).cte("recorded")


TRIED, ENDED, SETTLED, TRIED_LAST, ENDED_LAST, FAILED = (
    "tried",
    "ended",
    "settled",
    "tried_last",
    "ended_last",
    "failed",
)
"""What a flush may hold: step rows that count a new try or end one, settlements, the
settlements' last steps of either kind, and failed steps (whose tries are kept). A flush's
statement has only the parts it needs."""


def flush_kinds(steps: Sequence[StepWrite], settlements: Sequence[Settlement]) -> frozenset[str]:
    """The parts of :func:`flush_statement` that these writes need."""
    kinds = {TRIED if write.new_try else ENDED for write in steps}
    last = [x.step for x in settlements if x.step is not None]
    if settlements:
        kinds.add(SETTLED)
        kinds.update(TRIED_LAST if step.new_try else ENDED_LAST for step in last)
    if any(write.status is StepStatus.FAILED for write in (*steps, *last)):
        kinds.add(FAILED)
    return frozenset(kinds)


def flush_statement(kinds: frozenset[str]) -> sa.Executable:
    """The flush of writes of ``kinds`` (:func:`flush_kinds`), with the parameters of
    :func:`flush_params`; it returns the step rows (``workflows``, ``indexes``) and the
    workflows (``settled``) that landed."""
    puts = [
        _put_steps(new_try) for kind, new_try in ((TRIED, True), (ENDED, False)) if kind in kinds
    ]
    landed = [sa.select(put.c.workflow_id, put.c.step_index) for put in puts]
    columns: list[Any] = [sa.null().label("workflows"), sa.null().label("indexes")]
    steps = None
    if landed:
        rows = (sa.union_all(*landed) if len(landed) > 1 else landed[0]).subquery("landed")
        steps = sa.select(
            sa.func.array_agg(rows.c.workflow_id).label("workflows"),
            sa.func.array_agg(rows.c.step_index).label("indexes"),
        ).subquery("steps")
        columns = [steps.c.workflows, steps.c.indexes]
    last: list[Any] = []
    also: list[Any] = []
    if SETTLED in kinds:
        settled, recorded = _settle()
        columns.append(
            sa.select(sa.func.array_agg(settled.c.id)).scalar_subquery().label("settled")
        )
        last = [
            _put_steps(new_try, settled)
            for kind, new_try in ((TRIED_LAST, True), (ENDED_LAST, False))
            if kind in kinds
        ]
        also = [recorded, *last]
    else:
        columns.append(sa.null().label("settled"))
    if FAILED in kinds:
        # Each failed step row's try is kept, by the rule fail_step follows.
        also += [record_tries(put).cte(f"kept_{put.name}") for put in (*puts, *last)]
    statement = sa.select(*columns)
    if steps is not None:
        statement = statement.select_from(steps)
    return statement.add_cte(*also) if also else statement


def flush_params(steps: Sequence[StepWrite], settlements: Sequence[Settlement]) -> Params:
    """The parameters of :func:`flush_statement` for these writes (a new try's row starts
    as long before the statement's ``now()`` as its try began before this call): only
    the step columns when there are step rows and the settlement columns when there are
    settlements, as :func:`flush_kinds` leaves the statement only those parts."""
    columns: dict[str, list[Any]] = {}
    last = [s.step for s in settlements if s.step is not None]
    if steps or last:
        sent = time.monotonic()
        rows = [*steps, *last]
        columns.update(
            s_workflow=[w.lease.workflow_id for w in rows],
            s_token=[w.lease.token for w in rows],
            s_step_index=[w.index for w in rows],
            s_step_name=[w.name for w in rows],
            s_status=[w.status.value for w in rows],
            s_input=[w.input for w in rows],
            s_output=[w.output for w in rows],
            s_error=[w.error for w in rows],
            s_new_try=[w.new_try for w in rows],
            s_ran=[0.0 if w.began is None else max(0.0, sent - w.began) for w in rows],
            s_settling=[False] * len(steps) + [True] * len(last),
            s_path=[w.path for w in rows],
        )
    if settlements:
        columns.update(
            x_workflow=[s.lease.workflow_id for s in settlements],
            x_token=[s.lease.token for s in settlements],
            x_status=[s.status.value for s in settlements],
            x_output=[s.output for s in settlements],
            x_error=[s.error for s in settlements],
            x_delay=[s.retry_delay_seconds for s in settlements],
            x_attempt_no=[s.lease.attempt for s in settlements],
            x_worker_name=[s.lease.worker_id for s in settlements],
            x_started=[s.lease.started_at for s in settlements],
            x_ended_as=[settled_outcome(s.status) for s in settlements],
        )
    params: dict[str, Any] = {}
    for name, values in columns.items():
        if name in _TEXT:
            packed = params[name] = _packed(values)
            params[f"{name}_array"] = values if packed is None else None
        else:
            params[name] = values
    return params


def landed(
    row: Row, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
) -> tuple[list[bool], list[bool]]:
    """Which of the writes the flush's result row says landed, in their order."""
    written = set(zip(row["workflows"] or (), row["indexes"] or (), strict=True))
    settled = set(row["settled"] or ())
    return (
        [(w.lease.workflow_id, w.index) in written for w in steps],
        [s.lease.workflow_id in settled for s in settlements],
    )
