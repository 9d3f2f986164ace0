"""Column types shared by every version of the durable schema."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from ..errors import CorruptRecordError
from ..seams.records import FOREVER

EARLIEST = datetime.min.replace(tzinfo=UTC)
"""The earliest moment a stored one is read as (an earlier one is read as this)."""

_YEAR = re.compile(r"\s*(-?)0*(\d+)-")


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    PostgreSQL stores ``timestamptz``; SQLite and MySQL store naive UTC (with
    microseconds on MySQL) and get the UTC zone back on read.

    A stored moment Python's ``datetime`` cannot hold (past year 9999, before year
    1, PostgreSQL's ``infinity``: written by hand or by an older version) is read
    as :data:`~durable_core.seams.records.FOREVER` or :data:`EARLIEST`, so no such row
    breaks a read of the others.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("durable-core stores timezone-aware datetimes only")
        if dialect.name == "postgresql":
            return value
        return value.astimezone(UTC).replace(tzinfo=None)

    def column_expression(self, colexpr: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """What a statement selects: the column, clamped into range on PostgreSQL."""
        return _InRange(colexpr)

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], datetime | None] | None:
        process = super().result_processor(dialect, coltype)
        if process is None:
            return None

        def read(value: Any) -> datetime | None:
            try:
                return process(value)
            except (ValueError, TypeError, OverflowError):
                return _out_of_range(value)

        return read

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # a date the driver could not read (MySQL's zero date)
            return _out_of_range(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _out_of_range(value: Any) -> datetime:
    """The moment a stored text whose year is out of range is read as; a
    :class:`CorruptRecordError` if it is no date and time at all."""
    found = _YEAR.match(value) if isinstance(value, str) else None
    if found is None or (1 <= int(found.group(2)) <= 9999 and not found.group(1)):
        raise CorruptRecordError(f"a stored moment is not a date and time: {value!r}")
    return EARLIEST if found.group(1) or int(found.group(2)) < 1 else FOREVER


class _InRange(sa.sql.expression.FunctionElement[datetime]):
    """A moment column as selected: on PostgreSQL, clamped to what ``datetime`` holds."""

    name = "in_range"
    inherit_cache = True

    def __init__(self, column: sa.ColumnElement[Any]) -> None:
        super().__init__(column)
        self.type = column.type


@compiles(_InRange)
def _as_is(element: _InRange, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(_InRange, "postgresql")
def _clamped(element: _InRange, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    latest = f"TIMESTAMPTZ '{FOREVER:%Y-%m-%d} 00:00:00+00'"
    earliest = "TIMESTAMPTZ '0001-01-01 00:00:00+00'"
    return (
        f"CASE WHEN {column} > {latest} THEN {latest} "
        f"WHEN {column} < {earliest} THEN {earliest} ELSE {column} END"
    )


def json_text() -> sa.types.TypeEngine[str]:
    """JSON documents are stored as text; MySQL's TEXT stops at 64 KiB, so use LONGTEXT there."""
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
