"""The durable tables at the latest schema version, as SQLAlchemy Core ``Table`` objects.

They are built by replaying :data:`durable_core.sql.schema_history.VERSIONS`, so
the tables the queries use, the tables ``apply_schema()`` creates and the
Alembic revisions ``durable alembic`` writes cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic.operations import ops
from sqlalchemy.ext.asyncio import AsyncEngine

from .coltypes import UTCDateTime
from .schema_history import LATEST, VERSIONS, VERSIONS_TABLE, index_columns

SCHEMA_VERSION = LATEST
"""The schema version this release reads and writes."""


def _create_table(metadata: sa.MetaData, op: ops.MigrateOperation) -> None:
    assert isinstance(op, ops.CreateTableOp)
    op.to_table().to_metadata(metadata)


def _create_index(metadata: sa.MetaData, op: ops.MigrateOperation) -> None:
    assert isinstance(op, ops.CreateIndexOp)
    table = metadata.tables[op.table_name]
    sa.Index(op.index_name, *index_columns(table, op), unique=bool(op.unique), **op.kw)


def _add_column(metadata: sa.MetaData, op: ops.MigrateOperation) -> None:
    assert isinstance(op, ops.AddColumnOp)
    metadata.tables[op.table_name].append_column(op.column)


def _drop_index(metadata: sa.MetaData, op: ops.MigrateOperation) -> None:
    assert isinstance(op, ops.DropIndexOp)
    table = metadata.tables[str(op.table_name)]
    table.indexes.remove(next(ix for ix in table.indexes if ix.name == op.index_name))


def _alter_column(metadata: sa.MetaData, op: ops.MigrateOperation) -> None:
    assert isinstance(op, ops.AlterColumnOp)
    if op.modify_type is not None:
        metadata.tables[op.table_name].c[op.column_name].type = op.modify_type


def _drop_constraint(metadata: sa.MetaData, op: ops.MigrateOperation) -> None:
    assert isinstance(op, ops.DropConstraintOp)
    table = metadata.tables[op.table_name]
    constraint = next(c for c in table.constraints if c.name == op.constraint_name)
    table.constraints.remove(constraint)
    if isinstance(constraint, sa.ForeignKeyConstraint):
        for key in constraint.elements:
            key.parent.foreign_keys.discard(key)
            table.foreign_keys.discard(key)


def _create_foreign_key(metadata: sa.MetaData, op: ops.MigrateOperation) -> None:
    assert isinstance(op, ops.CreateForeignKeyOp)
    table = metadata.tables[op.source_table]
    table.append_constraint(
        sa.ForeignKeyConstraint(
            op.local_cols,
            [f"{op.referent_table}.{column}" for column in op.remote_cols],
            name=op.constraint_name,
            **op.kw,
        )
    )


_REPLAY: dict[type[ops.MigrateOperation], Callable[[sa.MetaData, ops.MigrateOperation], None]] = {
    ops.CreateTableOp: _create_table,
    ops.CreateIndexOp: _create_index,
    ops.AddColumnOp: _add_column,
    ops.DropIndexOp: _drop_index,
    ops.AlterColumnOp: _alter_column,
    ops.DropConstraintOp: _drop_constraint,
    ops.CreateForeignKeyOp: _create_foreign_key,
}


def build_metadata(version: int = SCHEMA_VERSION) -> sa.MetaData:
    """The durable tables as they stand at ``version``."""
    metadata = sa.MetaData()
    for step in VERSIONS[:version]:
        for op in step.operations():
            _REPLAY[type(op)](metadata, op)
    return metadata


metadata = build_metadata()
workflows = metadata.tables["workflows"]
workflow_steps = metadata.tables["workflow_steps"]
schema_versions = metadata.tables[VERSIONS_TABLE]
workflow_messages = metadata.tables["workflow_messages"]
workflow_events = metadata.tables["workflow_events"]
workflow_attempts = metadata.tables["workflow_attempts"]
workflow_schedules = metadata.tables["workflow_schedules"]
workflow_step_tries = metadata.tables["workflow_step_tries"]
workflow_workers = metadata.tables["workflow_workers"]
workflow_streams = metadata.tables["workflow_streams"]
workflow_updates = metadata.tables["workflow_updates"]
workflow_debounces = metadata.tables["workflow_debounces"]
workflow_attributes = metadata.tables["workflow_attributes"]


WORKFLOW_TABLES = ", ".join(
    table.name for table in reversed(metadata.sorted_tables) if table is not schema_versions
)
"""The workflow tables, each before the tables it references (for TRUNCATE and DROP)."""


async def drop_schema(engine: AsyncEngine) -> None:
    """Drop the durable tables (tests only)."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)


__all__ = [
    "SCHEMA_VERSION",
    "WORKFLOW_TABLES",
    "UTCDateTime",
    "build_metadata",
    "drop_schema",
    "metadata",
    "schema_versions",
    "workflow_attempts",
    "workflow_attributes",
    "workflow_events",
    "workflow_messages",
    "workflow_schedules",
    "workflow_step_tries",
    "workflow_steps",
    "workflow_streams",
    "workflow_updates",
    "workflow_workers",
    "workflows",
]
