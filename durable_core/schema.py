"""The durable tables, defined once with SQLAlchemy Core.

Both routes that apply the schema (``apply_schema`` from code or the CLI, and
the Alembic revision written by ``durable alembic``) build it from this
``metadata``, so they cannot drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    PostgreSQL stores ``timestamptz``; SQLite and MySQL store naive UTC (with
    microseconds on MySQL) and get the UTC zone back on read.
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

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _json_text() -> sa.types.TypeEngine[str]:
    """JSON documents are stored as text; MySQL's TEXT stops at 64 KiB, so use LONGTEXT there."""
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


metadata = sa.MetaData()

workflows = sa.Table(
    "workflows",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("input", _json_text(), nullable=False),
    sa.Column("output", _json_text(), nullable=True),
    sa.Column("error", _json_text(), nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("run_at", UTCDateTime(), nullable=False),
    sa.Column("locked_by", sa.String(255), nullable=True),
    sa.Column("lock_token", sa.String(36), nullable=True),
    sa.Column("locked_until", UTCDateTime(), nullable=True),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
    sa.Column("completed_at", UTCDateTime(), nullable=True),
    # The claim reads pending rows in run_at order and expired leases in
    # locked_until order; each has its own index so neither sorts the table.
    sa.Index("ix_workflows_status_run_at", "status", "run_at"),
    sa.Index("ix_workflows_status_locked_until", "status", "locked_until"),
    sa.Index("ix_workflows_name_created_at", "name", "created_at"),
    sa.Index("ix_workflows_created_at", "created_at"),
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

workflow_steps = sa.Table(
    "workflow_steps",
    metadata,
    sa.Column(
        "workflow_id",
        sa.String(36),
        sa.ForeignKey("workflows.id", ondelete="CASCADE", name="fk_workflow_steps_workflow_id"),
        primary_key=True,
    ),
    sa.Column("step_index", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("step_name", sa.String(255), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("input", _json_text(), nullable=False),
    sa.Column("output", _json_text(), nullable=True),
    sa.Column("error", _json_text(), nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("1")),
    sa.Column("started_at", UTCDateTime(), nullable=False),
    sa.Column("completed_at", UTCDateTime(), nullable=True),
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)


async def apply_schema(engine: AsyncEngine) -> None:
    """Create the durable tables and indexes on ``engine`` if they are missing."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)


async def drop_schema(engine: AsyncEngine) -> None:
    """Drop the durable tables (tests and ``durable migrate --drop`` only)."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)
