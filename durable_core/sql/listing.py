"""The listing queries: a page of workflows filtered and newest first, and an operator's
counts, groupings and id walks over the workflows a filter covers.

Each filter of ``list_workflows`` is written once (:data:`LIST_FILTERS`); the
single-row statements are :mod:`durable_core.sql.statements`'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from ..seams.records import WorkflowStatus
from .coltypes import UTCDateTime
from .dialect import SQLDialect
from .rows import STEP_FIELDS
from .rules import param, st, status_in, wf


def after_cursor() -> list[sa.ColumnElement[bool]]:
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


LIST_FILTERS: dict[str, Callable[[SQLDialect], list[sa.ColumnElement[bool]]]] = {
    "status": lambda d: [wf.c.status == param("status")],
    "name": lambda d: [wf.c.name == param("name")],
    "queue": lambda d: [wf.c.queue == param("queue_name")],
    "parent_id": lambda d: [wf.c.parent_id == param("parent")],
    "error_type": lambda d: [error_type(d) == param("error_kind")],
    "created_after": lambda d: [wf.c.created_at >= param("created_after", UTCDateTime())],
    "created_before": lambda d: [wf.c.created_at < param("created_before", UTCDateTime())],
    "before": lambda d: after_cursor(),
}
"""How each filter of ``list_workflows`` is written; the parameter is the filter's value."""

LIST_PARAMS = {"parent_id": "parent", "queue": "queue_name", "error_type": "error_kind"}
"""The parameter of each filter whose name is a column's (or would read as one)."""


def filter_params(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of the filters ``filters`` (by filter name; a status by its value)."""
    return {
        LIST_PARAMS.get(key, key): getattr(value, "value", value) for key, value in filters.items()
    }


def list_workflows(dialect: SQLDialect, filters: frozenset[str]) -> sa.Select[Any]:
    """The newest workflows first, filtered by the parameters named in ``filters``:
    ``status``, ``name``, ``queue``, ``parent_id``, ``error_type``, ``created_after``,
    ``created_before`` and ``before`` (the id of the row the page continues after)."""
    query = (
        sa.select(wf)
        .order_by(wf.c.created_at.desc(), wf.c.id.desc())
        .limit(param("limit", sa.Integer()))
    )
    for name in sorted(filters):
        query = query.where(*LIST_FILTERS[name](dialect))
    return query


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
            query = query.where(*LIST_FILTERS[name](self.dialect))
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
