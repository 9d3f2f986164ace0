"""Searchable attributes in the shared SQL store (the ``workflow_attributes`` table, schema 9).

One row per workflow and name holds the value in the column of its type, and a copy of
the workflow's ``created_at``: a list filtered by an attribute walks the index of
``(name, value, created_at, workflow_id)`` of the first filter newest first, joining
each workflow row by its key, so a filter on a million rows reads a page of them. A
body's attributes are written in the transaction that records its call (fenced by the
lease); a caller's and a start's, in one transaction of their own or the start's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..errors import WorkflowNotFoundError
from ..seams.attributes import (
    AttributeFilter,
    AttributeRange,
    AttributeValue,
    check_attributes,
    check_filters,
    kind_of,
)
from ..seams.records import BodyCall, Lease, NewWorkflow, WorkflowRecord, WorkflowStatus
from . import schema
from .base import SQLStoreBase
from .coltypes import UTCDateTime
from .connector import Params, Session
from .dialect import SQLDialect
from .listing import LIST_FILTERS, filter_params
from .rows import record_from_row
from .rules import param, wf

at = schema.workflow_attributes

KINDS = ("text", "number", "bool")
"""The value columns, ``value_<kind>``."""
_TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    "text": sa.String(),
    "number": sa.Double(),
    "bool": sa.Boolean(),
}
_ON_ATTRIBUTE = ("created_after", "created_before", "before")
"""The list filters answered on the first attribute's copy of ``created_at`` (its index)."""

Shape = tuple[tuple[str, str], ...]
"""Each attribute filter's kind and test: ``eq``, ``ge``, ``le`` or ``between``."""


def _test(wanted: AttributeFilter) -> tuple[str, str]:
    if isinstance(wanted, AttributeRange):
        test = {(True, True): "between", (True, False): "ge", (False, True): "le"}
        return "number", test[(wanted.min is not None, wanted.max is not None)]
    return kind_of(wanted), "eq"


def _ordered(filters: Mapping[str, AttributeFilter]) -> list[tuple[str, AttributeFilter]]:
    """Equalities first (the first filter drives the list: its index gives the order)."""
    return sorted(filters.items(), key=lambda item: (_test(item[1])[1] != "eq", item[0]))


def _value_params(values: Mapping[str, AttributeValue]) -> list[Params]:
    return [
        {
            "attribute": name,
            **{f"value_{kind}": value if kind_of(value) == kind else None for kind in KINDS},
        }
        for name, value in values.items()
    ]


class AttributeStatements:
    """Every statement on ``workflow_attributes``, built once for one dialect; the filtered
    lists when first used."""

    def __init__(self, dialect: SQLDialect) -> None:
        self.dialect = d = dialect
        self._lists: dict[tuple[frozenset[str], Shape], sa.Select[Any]] = {}
        self.exists = sa.select(wf.c.id).where(wf.c.id == param("workflow"))
        source = sa.select(
            wf.c.id,
            param("attribute", sa.String()),
            *(param(f"value_{kind}", _TYPES[kind]) for kind in KINDS),
            wf.c.created_at,
        ).where(wf.c.id == param("workflow"))
        columns = ["workflow_id", "name", *(f"value_{kind}" for kind in KINDS), "created_at"]
        self.put = d.upsert(
            d.insert(at).from_select(columns, source),
            [at.c.workflow_id, at.c.name],
            lambda new: {f"value_{kind}": new(f"value_{kind}") for kind in KINDS},
        )
        self.remove = at.delete().where(
            at.c.workflow_id == param("workflow"), at.c.name == param("attribute")
        )
        self.get = (
            sa.select(at.c.name, *(at.c[f"value_{kind}"] for kind in KINDS))
            .where(at.c.workflow_id == param("workflow"))
            .order_by(at.c.name)
        )

    def listed(self, filters: frozenset[str], shape: Shape) -> sa.Select[Any]:
        """The newest workflows first whose attributes pass ``shape``'s tests (parameters
        ``a<i>_name``, ``a<i>_value``, ``a<i>_min``, ``a<i>_max``), filtered by the list
        filters named in ``filters`` as ``Statements.list_workflows`` is."""
        key = (filters, shape)
        query = self._lists.get(key)
        if query is None:
            query = self._lists[key] = self._build(filters, shape)
        return query

    def _build(self, filters: frozenset[str], shape: Shape) -> sa.Select[Any]:
        aliases = [at.alias(f"a{i}") for i in range(len(shape))]
        first = aliases[0]
        joined: sa.FromClause = first
        tests: list[sa.ColumnElement[bool]] = []
        for i, (a, (kind, test)) in enumerate(zip(aliases, shape, strict=True)):
            value, typed = a.c[f"value_{kind}"], _TYPES[kind]
            mine = [a.c.name == param(f"a{i}_name")]
            if test == "eq":
                mine.append(value == param(f"a{i}_value", typed))
            if test in ("ge", "between"):
                mine.append(value >= param(f"a{i}_min", typed))
            if test in ("le", "between"):
                mine.append(value <= param(f"a{i}_max", typed))
            if a is first:
                tests.extend(mine)
            else:
                joined = joined.join(a, sa.and_(a.c.workflow_id == first.c.workflow_id, *mine))
        if "created_after" in filters:
            tests.append(first.c.created_at >= param("created_after", UTCDateTime()))
        if "created_before" in filters:
            tests.append(first.c.created_at < param("created_before", UTCDateTime()))
        if "before" in filters:
            cursor = wf.alias("cursor")
            moment = (
                sa.select(cursor.c.created_at)
                .where(cursor.c.id == param("before"))
                .scalar_subquery()
            )
            tests.append(first.c.created_at <= moment)
            tests.append(sa.or_(first.c.created_at < moment, first.c.workflow_id < param("before")))
        newest = (first.c.created_at.desc(), first.c.workflow_id.desc())
        limit = param("limit", sa.Integer())
        on_rows = sorted(filters - set(_ON_ATTRIBUTE))
        if not on_rows:
            # Every filter is the attributes': the page is found in their table alone, and
            # only its workflows are read (not every match's, before a sort of a range).
            page = (
                sa.select(first.c.workflow_id, first.c.created_at)
                .select_from(joined)
                .where(*tests)
                .order_by(*newest)
                .limit(limit)
                .subquery("page")
            )
            return (
                sa.select(wf)
                .join(page, page.c.workflow_id == wf.c.id)
                .order_by(page.c.created_at.desc(), page.c.workflow_id.desc())
            )
        query = (
            sa.select(wf)
            .select_from(joined.join(wf, wf.c.id == first.c.workflow_id))
            .where(*tests)
            .order_by(*newest)
            .limit(limit)
        )
        for name in on_rows:
            query = query.where(*LIST_FILTERS[name](self.dialect))
        return query


class AttributeOperations(SQLStoreBase):
    """Set, read and list by attributes (mixed into ``SQLStore``): the ``Attributes`` role."""

    _attribute_statements: AttributeStatements | None = None

    @property
    def _atq(self) -> AttributeStatements:
        if self._attribute_statements is None:
            self._attribute_statements = AttributeStatements(self.dialect)
        return self._attribute_statements

    async def _write_attributes(
        self, session: Session, workflow_id: str, values: Mapping[str, AttributeValue | None]
    ) -> None:
        q = self._atq
        kept = {name: value for name, value in values.items() if value is not None}
        gone = [name for name, value in values.items() if value is None]
        if kept:
            rows = [{"workflow": workflow_id, **p} for p in _value_params(kept)]
            await session.execute_many(q.put, rows)
        if gone:
            await session.execute_many(
                q.remove, [{"workflow": workflow_id, "attribute": name} for name in gone]
            )

    async def _enqueued(self, session: Session, rows: Sequence[NewWorkflow]) -> None:
        """Write the attributes each new row was started with (in the start's transaction)."""
        for row in rows:
            if row.attributes:
                await self._write_attributes(session, row.id, check_attributes(row.attributes))

    async def record_attributes(
        self,
        lease: Lease,
        values: Mapping[str, AttributeValue | None],
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> None:
        """Set (``None``: remove) the held workflow's attributes and record the call's step,
        in one transaction fenced by ``lease``."""
        checked = check_attributes(values)
        call = BodyCall(lease, step_index, step_name, input, "null", path)
        await self._check_call(call)
        async with self._transaction("record_attributes") as session:
            await self._fence(session, lease, "setting attributes")
            await self._write_attributes(session, lease.workflow_id, checked)
            await self._record_call(session, call, "setting attributes")

    async def set_attributes(
        self, workflow_id: str, values: Mapping[str, AttributeValue | None]
    ) -> None:
        """Set (``None``: remove) ``workflow_id``'s attributes, whatever its state."""
        checked = check_attributes(values)
        async with self._transaction("set_attributes") as session:
            if not await session.fetch(self._atq.exists, {"workflow": workflow_id}):
                raise WorkflowNotFoundError(
                    f"no workflow with id {workflow_id!r} in {self.description}"
                )
            await self._write_attributes(session, workflow_id, checked)

    async def get_attributes(self, workflow_id: str) -> dict[str, AttributeValue]:
        """``workflow_id``'s attributes by name; a whole number reads back as an ``int``."""
        rows = await self._fetch("get_attributes", self._atq.get, {"workflow": workflow_id})
        found: dict[str, AttributeValue] = {}
        for row in rows:
            if row["value_text"] is not None:
                found[row["name"]] = str(row["value_text"])
            elif row["value_bool"] is not None:
                found[row["name"]] = bool(row["value_bool"])
            elif row["value_number"] is not None:
                number = float(row["value_number"])
                found[row["name"]] = int(number) if number.is_integer() else number
        return found

    async def list_by_attributes(
        self,
        attributes: Mapping[str, AttributeFilter],
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
    ) -> list[WorkflowRecord]:
        """The newest workflows first whose attributes pass every filter of ``attributes``,
        further filtered as ``list_workflows`` is."""
        ordered = _ordered(check_filters(attributes))
        given = {
            "status": status,
            "name": name,
            "queue": queue,
            "parent_id": parent_id,
            "error_type": error_type,
            "created_after": created_after,
            "created_before": created_before,
            "before": before,
        }
        filters = {key: value for key, value in given.items() if value is not None}
        params: dict[str, Any] = {"limit": limit, **filter_params(filters)}
        for i, (attribute, wanted) in enumerate(ordered):
            params[f"a{i}_name"] = attribute
            if isinstance(wanted, AttributeRange):
                for end in ("min", "max"):
                    if getattr(wanted, end) is not None:
                        params[f"a{i}_{end}"] = getattr(wanted, end)
            else:
                params[f"a{i}_value"] = wanted
        shape = tuple(_test(wanted) for _, wanted in ordered)
        query = self._atq.listed(frozenset(filters), shape)
        one_value = len(shape) == 1 and shape[0][1] == "eq"
        if self._plan_for_values is None or (one_value and not set(filters) - set(_ON_ATTRIBUTE)):
            # One value on its own index: one plan fits every value (it walks the value's
            # entries newest first, however many there are). With a range, several filters
            # or a workflow row's, which to walk first depends on the values.
            rows = await self._fetch("list_by_attributes", query, params)
        else:
            async with self._transaction("list_by_attributes") as session:
                await session.execute(self._plan_for_values)
                rows = await session.fetch(query, self.dialect.bind_clock(params))
        return [record_from_row(row) for row in rows]
