"""The keyed part of the PostgreSQL claim: queues with a per-key limit (``key_concurrency``,
``key_rate_limit``), claimed fairly among their keys.

A lane's due rows in priority order may all be one hot key's: a claim that looked only
at the first ``limit`` of them would find no other key's work while the hot key is at
its limit. So for a keyed lane the claim also walks its keys: a skip scan of
``ix_workflows_keyed`` finds the next key after a pivot (and from the first key), one
index probe a key, up to ``max_keys`` keys, and takes each key's first rows (at most
what the key may start). The pivot is the last key the store claimed, so successive
claims go round the keys. The rows are then ordered by the load of their key (what it
runs now plus the rows ahead of it in this claim): the least busy key first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from durable_core.definitions.queues import Route
from durable_core.sql.coltypes import UTCDateTime
from durable_core.sql.connector import Params
from durable_core.sql.rules import PENDING, param, wf

MAX_KEYS = 128
"""The keys of one lane one claim looks at, after its pivot and from the first key each."""


def _next_key(queue: Any, name: Any, after: Any) -> sa.ScalarSelect[Any]:
    """The first key after ``after`` with a pending row in the lane (one index probe).

    Bounded and ordered by (name, key) rather than by an equality on the name, so only
    ix_workflows_keyed serves it: fixed by equalities, the lane let the planner walk
    ix_workflows_concurrency_key instead, through every keyed row of the other lanes.
    A row found is the lane's: its name at most ``name``, and (name, key) past
    (``name``, ``after``).
    """
    return (
        sa.select(wf.c.concurrency_key)
        .where(
            wf.c.status == PENDING,
            wf.c.queue == queue,
            wf.c.concurrency_key.is_not(None),
            sa.tuple_(wf.c.name, wf.c.concurrency_key) > sa.tuple_(name, after),
            wf.c.name <= name,
        )
        .order_by(wf.c.name, wf.c.concurrency_key)
        .limit(1)
        .scalar_subquery()
    )


def keyed_scan(columns: Sequence[sa.ColumnElement[Any]]) -> sa.Select[Any]:
    """The due rows of the keyed lanes (``keyed_queues``, ``keyed_names``, ``keyed_caps``
    parameters), at most the lane's cap per key, with ``columns`` and the claim's
    candidate columns, locked (SKIP LOCKED)."""
    lanes = (
        sa.func.unnest(
            param("keyed_queues", postgresql.ARRAY(sa.Text())),
            param("keyed_names", postgresql.ARRAY(sa.Text())),
            param("keyed_caps", postgresql.ARRAY(sa.Integer())),
        )
        .table_valued("queue", "name", "cap")
        .render_derived(name="keyed_lane")
    )
    starts = (
        sa.func.unnest(postgresql.array([param("key_pivot", sa.Text()), sa.literal("", sa.Text())]))
        .table_valued("after")
        .render_derived(name="start")
    )
    first = sa.select(
        lanes.c.queue,
        lanes.c.name,
        lanes.c.cap,
        _next_key(lanes.c.queue, lanes.c.name, starts.c.after).label("key"),
        sa.literal(1).label("n"),
    ).select_from(lanes.join(starts, sa.true()))
    keys = first.cte("lane_keys", recursive=True)
    keys = keys.union_all(
        sa.select(
            keys.c.queue,
            keys.c.name,
            keys.c.cap,
            _next_key(keys.c.queue, keys.c.name, keys.c.key),
            keys.c.n + 1,
        ).where(keys.c.key.is_not(None), keys.c.n < const_int(MAX_KEYS))
    )
    found = (
        sa.select(keys.c.queue, keys.c.name, keys.c.cap, keys.c.key)
        .where(keys.c.key.is_not(None))
        .distinct()
        .subquery("found_keys")
    )
    rows = (
        sa.select(*columns)
        .where(
            wf.c.status == PENDING,
            wf.c.queue == found.c.queue,
            wf.c.name == found.c.name,
            wf.c.concurrency_key == found.c.key,
            wf.c.run_at <= sa.func.now(),
        )
        .order_by(wf.c.priority.desc(), wf.c.run_at)
        .limit(found.c.cap)
        .with_for_update(skip_locked=True)
        .lateral("per_key")
    )
    return sa.select(
        *rows.c,
        sa.false().label("stale"),
        sa.cast(sa.null(), sa.String()).label("crashed_worker"),
        sa.cast(sa.null(), UTCDateTime()).label("crashed_at"),
    ).select_from(found.join(rows, sa.true()))


def const_int(value: int) -> sa.ColumnElement[int]:
    """``value`` written into the statement."""
    return sa.literal_column(str(int(value)), sa.Integer())


def keyed_params(routes: Sequence[Route], pivot: str) -> Params:
    """The keyed lanes of ``routes`` and the key limits of their queues."""
    lanes = [
        (route.queue.name, name, route.queue.per_key)
        for route in routes
        if route.queue.keyed
        for name in route.names
    ]
    queues = [route.queue for route in routes]
    return {
        "keyed_queues": [queue for queue, _, _ in lanes],
        "keyed_names": [name for _, name, _ in lanes],
        "keyed_caps": [cap for _, _, cap in lanes],
        "key_pivot": pivot,
        "key_rates": [None if q.key_rate_limit is None else q.key_rate_limit.limit for q in queues],
        "key_periods": [
            None if q.key_rate_limit is None else q.key_rate_limit.period for q in queues
        ],
    }


__all__ = ["MAX_KEYS", "keyed_params", "keyed_scan"]
