"""The quotas of the PostgreSQL claim: what each served queue may still hand out (the
worker's own room, the fleet's concurrency and rate), the limits of each concurrency key,
and, in a keyed queue, the order that serves the least busy key first."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from durable_core.sql import const
from durable_core.sql.rules import RUNNING, param, wf


def seconds_after_now(seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """The server's ``now()`` plus ``seconds`` (any float expression)."""
    return sa.func.now() + seconds * sa.literal_column("interval '1 second'", sa.Interval)


def within_quotas(candidates: Any, order: tuple[Any, ...], limit: Any) -> Any:
    """The claim's rows among ``candidates``, in ``order``, within each served queue's
    share: the worker's own room, its fleet concurrency and rate, its key limits; in a
    keyed queue, the least busy key first."""
    now = sa.func.now()
    # What each served queue may still hand out: the worker's own room, less what the
    # fleet runs against the queue's concurrency, less what started in the rate window.
    quotas = (
        sa.func.unnest(
            param("queues", postgresql.ARRAY(sa.Text())),
            param("takes", postgresql.ARRAY(sa.Integer())),
            param("fleet", postgresql.ARRAY(sa.Integer())),
            param("rates", postgresql.ARRAY(sa.Integer())),
            param("periods", postgresql.ARRAY(sa.Float())),
            param("key_limits", postgresql.ARRAY(sa.Integer())),
            param("key_rates", postgresql.ARRAY(sa.Integer())),
            param("key_periods", postgresql.ARRAY(sa.Float())),
        )
        .table_valued(
            "queue", "take", "fleet", "rate", "period", "key_limit", "key_rate", "key_period"
        )
        .render_derived(name="quota")
    )
    running = sa.and_(wf.c.status == RUNNING, wf.c.locked_until >= now)

    def counted(*where: sa.ColumnElement[bool]) -> sa.ScalarSelect[Any]:
        return sa.select(sa.func.count()).select_from(wf).where(*where).scalar_subquery()

    def limited(cap: sa.ColumnElement[Any], used: sa.ColumnElement[Any]) -> Any:
        # CASE evaluates the count only for a queue that has the limit.
        return sa.case((cap.is_(None), sa.null()), else_=cap - used)

    window = seconds_after_now(-quotas.c.period)
    room = sa.func.least(
        quotas.c.take,
        limited(quotas.c.fleet, counted(running, wf.c.queue == quotas.c.queue)),
        limited(quotas.c.rate, counted(wf.c.queue == quotas.c.queue, wf.c.started_at > window)),
    )
    quota = sa.select(
        quotas.c.queue,
        quotas.c.key_limit,
        quotas.c.key_rate,
        quotas.c.key_period,
        room.label("room"),
    ).cte("quota")

    # Per key (within its queue): what runs now and what started in the key's rate
    # window, counted only where the queue has that limit, and the row's place among
    # its key's candidates in claim order.
    has_key = candidates.c.concurrency_key.is_not(None)
    keyed_queue = sa.or_(quota.c.key_limit.is_not(None), quota.c.key_rate.is_not(None))
    same_key = (
        wf.c.concurrency_key == candidates.c.concurrency_key,
        wf.c.queue == candidates.c.queue,
    )
    # Starts in each key's rate window, counted once per keyed queue from the queue's
    # recent starts (ix_workflows_queue_started_at): never a walk of a key's history.
    key_window = seconds_after_now(-quota.c.key_period)
    recent = (
        sa.select(wf.c.queue, wf.c.concurrency_key, sa.func.count().label("started"))
        .select_from(wf.join(quota, quota.c.queue == wf.c.queue))
        .where(
            quota.c.key_rate.is_not(None),
            wf.c.started_at > key_window,
            wf.c.concurrency_key.is_not(None),
        )
        .group_by(wf.c.queue, wf.c.concurrency_key)
        .cte("recent")
    )
    counts = (
        sa.select(
            candidates,
            quota.c.room,
            quota.c.key_limit,
            quota.c.key_rate,
            keyed_queue.label("keyed"),
            sa.case(
                (sa.and_(has_key, keyed_queue), counted(running, *same_key)), else_=const(0)
            ).label("key_running"),
            sa.func.coalesce(recent.c.started, const(0)).label("key_started"),
            sa.func.row_number()
            .over(
                partition_by=(candidates.c.queue, candidates.c.concurrency_key),
                order_by=order,
            )
            .label("key_nth"),
        )
        .select_from(
            candidates.join(quota, quota.c.queue == candidates.c.queue).outerjoin(
                recent,
                sa.and_(
                    recent.c.queue == candidates.c.queue,
                    recent.c.concurrency_key == candidates.c.concurrency_key,
                ),
            )
        )
        .subquery("counts")
    )
    keyed_row = counts.c.concurrency_key.is_not(None)
    key_room = sa.case(
        (
            sa.and_(keyed_row, counts.c.key_limit.is_not(None)),
            counts.c.key_limit - counts.c.key_running - counts.c.key_nth,
        ),
        else_=const(0),
    )
    rate_room = sa.case(
        (
            sa.and_(keyed_row, counts.c.key_rate.is_not(None)),
            counts.c.key_rate - counts.c.key_started - counts.c.key_nth,
        ),
        else_=const(0),
    )
    # Fair among keys: a keyed queue's rows by their key's load (what it runs plus
    # its rows ahead in this claim); elsewhere the load is 0 and the order is as ever.
    load = sa.case((counts.c.keyed, counts.c.key_running + counts.c.key_nth), else_=const(0)).label(
        "key_load"
    )
    allowed = (
        sa.select(counts, load)
        .where(key_room >= const(0), rate_room >= const(0))
        .subquery("allowed")
    )
    fair = (
        allowed.c.stale.desc(),
        allowed.c.priority.desc(),
        allowed.c.key_load,
        allowed.c.run_at,
    )
    ranked = sa.select(
        allowed,
        sa.func.row_number().over(partition_by=allowed.c.queue, order_by=fair).label("nth"),
    ).subquery("ranked")
    picked = (
        sa.select(ranked.c.id, ranked.c.crashed_worker, ranked.c.crashed_at)
        .where(ranked.c.nth <= ranked.c.room)
        .order_by(
            ranked.c.stale.desc(),
            ranked.c.priority.desc(),
            ranked.c.key_load,
            ranked.c.run_at,
        )
        .limit(limit)
        .cte("picked")
        .prefix_with("MATERIALIZED")
    )
    return picked


__all__ = ["within_quotas"]
