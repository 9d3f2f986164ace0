"""The building blocks of the schema's versions: tables, indexes and columns as Alembic
operations, and what every version shares (see :mod:`durable_core.sql.schema_history`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from alembic.operations import ops

VERSIONS_TABLE = "durable_schema_versions"
"""The table recording which schema versions a database has (from version 2 on)."""


@dataclass(frozen=True)
class SchemaVersion:
    """One step of the schema's history."""

    number: int
    slug: str
    """The Alembic revision file's slug: ``<revision>_<slug>.py``."""
    message: str
    operations: Callable[[], list[ops.MigrateOperation]]
    """Fresh operation objects on every call (SQLAlchemy columns belong to one table)."""
    additive: bool = True
    """Whether workers of the release before run on a database migrated to this version
    (tables, indexes, nullable or defaulted columns added; columns widened). ``False``
    for a change that breaks them (a column dropped, renamed or narrowed, a new rule
    their writes break): its row in ``durable_schema_versions`` says so (see
    :data:`NOT_ADDITIVE`), and those workers refuse to start on it."""


NOT_ADDITIVE = "not additive: "
"""The start of a non-additive version's description in ``durable_schema_versions``: a
worker of an earlier release reads it there, since its code does not know that version."""


DESC = "-"
"""Prefixed to an index column's name: that column is in descending order."""


def _index(name: str, table: str, *columns: str) -> ops.CreateIndexOp:
    return ops.CreateIndexOp(
        name,
        table,
        [sa.text(f"{c[1:]} DESC") if c.startswith(DESC) else c for c in columns],
    )


def index_columns(table: sa.Table, op: ops.CreateIndexOp) -> list[sa.ColumnElement[Any]]:
    """The columns of ``op`` as expressions over ``table`` (a ``name DESC`` text descends)."""
    columns: list[sa.ColumnElement[Any]] = []
    for column in op.columns:
        name, _, order = str(column).partition(" ")
        columns.append(table.c[name].desc() if order == "DESC" else table.c[name])
    return columns


def _table(name: str, *items: sa.schema.SchemaItem) -> ops.CreateTableOp:
    # Built on a throwaway MetaData so the operation carries its constraints (a
    # column's ForeignKey becomes a named ForeignKeyConstraint only in a Table).
    table = sa.Table(
        name, sa.MetaData(), *items, mysql_charset="utf8mb4", mysql_collate="utf8mb4_bin"
    )
    return ops.CreateTableOp.from_table(table)


def _serial() -> sa.Column[int]:
    """An auto-incrementing ``seq`` primary key (SQLite's must be INTEGER to count)."""
    return sa.Column(
        "seq",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    )


def _workflow_id(table: str, length: int = 36) -> sa.Column[str]:
    """A ``workflow_id`` column of ``table``, its rows deleted with their workflow (36
    characters until version 7 widened every one to 255)."""
    return sa.Column(
        "workflow_id",
        sa.String(length),
        sa.ForeignKey("workflows.id", ondelete="CASCADE", name=f"fk_{table}_workflow_id"),
        nullable=False,
    )


NOT_ON_SQLITE = (ops.DropConstraintOp, ops.AlterColumnOp, ops.CreateForeignKeyOp)
"""Operations an upgrade skips on SQLite: it cannot alter a column or a constraint in
place, and does not enforce a VARCHAR's length, so its older columns already hold 255."""


def _partial(name: str, table: str, columns: tuple[str, ...], where: str) -> ops.CreateIndexOp:
    """An index of the rows where ``where`` holds (PostgreSQL, SQLite); where partial
    indexes do not exist (MySQL), of every row."""
    return ops.CreateIndexOp(
        name, table, list(columns), postgresql_where=sa.text(where), sqlite_where=sa.text(where)
    )
