"""Every version of the durable schema, as the Alembic operations that make it.

This history is the schema's single definition: :mod:`durable_core.sql.schema`
builds its tables by replaying it, ``apply_schema()`` / ``durable migrate``
run the operations a database lacks, and ``durable alembic`` renders each
version as a revision file. A released version never changes; a new release
appends a version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from alembic.operations import ops

from .coltypes import UTCDateTime, json_text

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


def _v1() -> list[ops.MigrateOperation]:
    workflows = _table(
        "workflows",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("input", json_text(), nullable=False),
        sa.Column("output", json_text(), nullable=True),
        sa.Column("error", json_text(), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("run_at", UTCDateTime(), nullable=False),
        sa.Column("locked_by", sa.String(255), nullable=True),
        sa.Column("lock_token", sa.String(36), nullable=True),
        sa.Column("locked_until", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("completed_at", UTCDateTime(), nullable=True),
    )
    steps = _table(
        "workflow_steps",
        sa.Column(
            "workflow_id",
            sa.String(36),
            sa.ForeignKey("workflows.id", ondelete="CASCADE", name="fk_workflow_steps_workflow_id"),
            primary_key=True,
        ),
        sa.Column("step_index", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("step_name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("input", json_text(), nullable=False),
        sa.Column("output", json_text(), nullable=True),
        sa.Column("error", json_text(), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("completed_at", UTCDateTime(), nullable=True),
    )
    return [
        workflows,
        # The claim reads pending rows in run_at order and expired leases in
        # locked_until order; each has its own index so neither sorts the table.
        _index("ix_workflows_created_at", "workflows", "created_at"),
        _index("ix_workflows_name_created_at", "workflows", "name", "created_at"),
        _index("ix_workflows_status_locked_until", "workflows", "status", "locked_until"),
        _index("ix_workflows_status_run_at", "workflows", "status", "run_at"),
        steps,
    ]


def _v2() -> list[ops.MigrateOperation]:
    return [
        _table(
            VERSIONS_TABLE,
            sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("description", sa.String(255), nullable=False),
            sa.Column("applied_at", UTCDateTime(), nullable=False),
        )
    ]


def _workflow_id(table: str, length: int = 36) -> sa.Column[str]:
    """A ``workflow_id`` column of ``table``, its rows deleted with their workflow (36
    characters until version 7 widened every one to 255)."""
    return sa.Column(
        "workflow_id",
        sa.String(length),
        sa.ForeignKey("workflows.id", ondelete="CASCADE", name=f"fk_{table}_workflow_id"),
        nullable=False,
    )


def _v3() -> list[ops.MigrateOperation]:
    workflow_id = _workflow_id
    return [
        # A child's parent; what a waiting workflow waits for ("sleep", "message:<topic>",
        # "child:<id>"), its deadline being run_at.
        ops.AddColumnOp("workflows", sa.Column("parent_id", sa.String(36), nullable=True)),
        ops.AddColumnOp("workflows", sa.Column("waiting_for", sa.String(255), nullable=True)),
        # When a workflow started with a timeout is cancelled wherever it is.
        ops.AddColumnOp("workflows", sa.Column("deadline", UTCDateTime(), nullable=True)),
        _index("ix_workflows_parent_id", "workflows", "parent_id"),
        _table(
            "workflow_messages",
            _serial(),
            workflow_id("workflow_messages"),
            sa.Column("topic", sa.String(255), nullable=False),
            sa.Column("message_id", sa.String(64), nullable=False),
            sa.Column("payload", json_text(), nullable=False),
            sa.Column("sent_at", UTCDateTime(), nullable=False),
        ),
        _index("ix_workflow_messages_inbox", "workflow_messages", "workflow_id", "topic", "seq"),
        ops.CreateIndexOp(
            "ux_workflow_messages_message_id",
            "workflow_messages",
            ["workflow_id", "message_id"],
            unique=True,
        ),
        _table(
            "workflow_attempts",
            _serial(),
            workflow_id("workflow_attempts"),
            sa.Column("attempt", sa.Integer, nullable=False),
            sa.Column("worker", sa.String(255), nullable=False),
            sa.Column("started_at", UTCDateTime(), nullable=True),
            sa.Column("ended_at", UTCDateTime(), nullable=False),
            sa.Column("outcome", sa.String(16), nullable=False),
            sa.Column("error", json_text(), nullable=True),
        ),
        _index("ix_workflow_attempts_workflow", "workflow_attempts", "workflow_id", "seq"),
        _table(
            "workflow_events",
            sa.Column(
                "workflow_id",
                sa.String(36),
                sa.ForeignKey(
                    "workflows.id", ondelete="CASCADE", name="fk_workflow_events_workflow_id"
                ),
                primary_key=True,
            ),
            sa.Column("key", sa.String(255), primary_key=True),
            sa.Column("value", json_text(), nullable=False),
            sa.Column("updated_at", UTCDateTime(), nullable=False),
        ),
    ]


def _v4() -> list[ops.MigrateOperation]:
    def add(column: sa.Column[Any]) -> ops.AddColumnOp:
        return ops.AddColumnOp("workflows", column)

    return [
        # Routing and flow: the queue a workflow waits in, its priority there (higher first),
        # the key its queue may limit, and when it first started (for rate limits).
        add(sa.Column("queue", sa.String(255), nullable=False, server_default="default")),
        add(sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0"))),
        add(sa.Column("concurrency_key", sa.String(255), nullable=True)),
        add(sa.Column("started_at", UTCDateTime(), nullable=True)),
        # What the starter passed along with the workflow (a trace context, say): a JSON object.
        add(sa.Column("headers", json_text(), nullable=True)),
        # The claim walks one (queue, name) range at a time in priority, then run_at order.
        _index(
            "ix_workflows_route",
            "workflows",
            "status",
            "queue",
            "name",
            DESC + "priority",
            "run_at",
        ),
        _index("ix_workflows_queue_started_at", "workflows", "queue", "started_at"),
        _index("ix_workflows_concurrency_key", "workflows", "concurrency_key", "status"),
        # The dashboard's list, newest first within a status or a queue.
        _index("ix_workflows_status_created_at", "workflows", "status", "created_at"),
        _index("ix_workflows_queue_created_at", "workflows", "queue", "created_at"),
        # A received message is kept, marked, so its idempotency key still refuses a
        # redelivery after the workflow took the first copy.
        ops.AddColumnOp(
            "workflow_messages", sa.Column("consumed_at", UTCDateTime(), nullable=True)
        ),
        _index(
            "ix_workflow_messages_unread",
            "workflow_messages",
            "workflow_id",
            "topic",
            "consumed_at",
            "seq",
        ),
        _table(
            "workflow_schedules",
            sa.Column("name", sa.String(255), primary_key=True),
            sa.Column("workflow_name", sa.String(255), nullable=False),
            sa.Column("cron", sa.String(255), nullable=False),
            sa.Column("timezone", sa.String(64), nullable=False, server_default="UTC"),
            sa.Column("input", json_text(), nullable=False),
            sa.Column("queue", sa.String(255), nullable=True),
            sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.text("false")),
            # What a tick missed while no worker ran becomes: "skip", or "catch_up" of at
            # most catch_up ticks.
            sa.Column("missed", sa.String(16), nullable=False, server_default="skip"),
            sa.Column("catch_up", sa.Integer, nullable=False, server_default=sa.text("0")),
            sa.Column("next_tick", UTCDateTime(), nullable=False),
            sa.Column("last_tick", UTCDateTime(), nullable=True),
            sa.Column("created_at", UTCDateTime(), nullable=False),
            sa.Column("updated_at", UTCDateTime(), nullable=False),
        ),
        _index("ix_workflow_schedules_next_tick", "workflow_schedules", "paused", "next_tick"),
    ]


def _v5() -> list[ops.MigrateOperation]:
    return [
        # Where a concurrent body called a step ("4.1"); NULL: str(step_index), as before.
        ops.AddColumnOp("workflow_steps", sa.Column("path", sa.String(255), nullable=True)),
        # Every failed try of a step, written with the step row that records the failure.
        _table(
            "workflow_step_tries",
            _serial(),
            _workflow_id("workflow_step_tries"),
            sa.Column("step_index", sa.Integer, nullable=False),
            sa.Column("try_number", sa.Integer, nullable=False),
            sa.Column("started_at", UTCDateTime(), nullable=False),
            sa.Column("ended_at", UTCDateTime(), nullable=False),
            sa.Column("error", json_text(), nullable=True),
        ),
        _index("ix_workflow_step_tries_workflow", "workflow_step_tries", "workflow_id", "seq"),
    ]


def _v6() -> list[ops.MigrateOperation]:
    return [
        # Each live worker's row, refreshed every heartbeat interval: who it is, what it
        # serves and how busy it is. A row whose expires_at has passed is a dead worker's.
        _table(
            "workflow_workers",
            sa.Column("worker_id", sa.String(255), primary_key=True),
            sa.Column("host", sa.String(255), nullable=False),
            sa.Column("pid", sa.Integer, nullable=False),
            sa.Column("concurrency", sa.Integer, nullable=False),
            sa.Column("queues", json_text(), nullable=False),
            sa.Column("names", json_text(), nullable=False),
            sa.Column("in_flight", sa.Integer, nullable=False, server_default=sa.text("0")),
            sa.Column("started_at", UTCDateTime(), nullable=False),
            sa.Column("heartbeat_at", UTCDateTime(), nullable=False),
            sa.Column("expires_at", UTCDateTime(), nullable=False),
        ),
        _index("ix_workflow_workers_expires_at", "workflow_workers", "expires_at"),
        # What ended in the last hour or day, per queue and outcome (the dashboard's activity).
        _index("ix_workflows_completed_at", "workflows", "completed_at", "queue", "status"),
    ]


NOT_ON_SQLITE = (ops.DropConstraintOp, ops.AlterColumnOp, ops.CreateForeignKeyOp)
"""Operations an upgrade skips on SQLite: it cannot alter a column or a constraint in
place, and does not enforce a VARCHAR's length, so its older columns already hold 255."""


def _partial(name: str, table: str, columns: tuple[str, ...], where: str) -> ops.CreateIndexOp:
    """An index of the rows where ``where`` holds (PostgreSQL, SQLite); where partial
    indexes do not exist (MySQL), of every row."""
    return ops.CreateIndexOp(
        name, table, list(columns), postgresql_where=sa.text(where), sqlite_where=sa.text(where)
    )


def _v7() -> list[ops.MigrateOperation]:
    # Ids users choose: every column holding a workflow's id, 36 characters until now,
    # takes 255 ("order-<uuid>" and longer). (table, column, nullable)
    id_columns = [
        ("workflows", "id", False),
        ("workflows", "parent_id", True),
        ("workflow_steps", "workflow_id", False),
        ("workflow_messages", "workflow_id", False),
        ("workflow_attempts", "workflow_id", False),
        ("workflow_events", "workflow_id", False),
        ("workflow_step_tries", "workflow_id", False),
    ]
    referencing = [table for table, column, _ in id_columns if column == "workflow_id"]
    widen: list[ops.MigrateOperation] = [
        ops.AlterColumnOp(
            table,
            column,
            modify_type=sa.String(255),
            existing_type=sa.String(36),
            existing_nullable=nullable,
        )
        for table, column, nullable in id_columns
    ]
    # "child:<id>" of a child with a caller's id: the prefix and 255 characters.
    widen.append(
        ops.AlterColumnOp(
            "workflows",
            "waiting_for",
            modify_type=sa.String(512),
            existing_type=sa.String(255),
            existing_nullable=True,
        )
    )
    # An index on a column that is mostly NULL holds only its other rows: a settle or a
    # claim then writes no entry there (parent_id, concurrency_key, started_at,
    # completed_at and locked_until are NULL for most rows or most of a row's life).
    narrowed = [
        ("ix_workflows_parent_id", "workflows", ("parent_id",), "parent_id IS NOT NULL"),
        (
            "ix_workflows_concurrency_key",
            "workflows",
            ("concurrency_key", "status"),
            "concurrency_key IS NOT NULL",
        ),
        (
            "ix_workflows_queue_started_at",
            "workflows",
            ("queue", "started_at"),
            "started_at IS NOT NULL",
        ),
        (
            "ix_workflows_completed_at",
            "workflows",
            ("completed_at", "queue", "status"),
            "completed_at IS NOT NULL",
        ),
        (
            "ix_workflows_status_locked_until",
            "workflows",
            ("status", "locked_until"),
            "locked_until IS NOT NULL",
        ),
    ]

    def foreign_key(table: str) -> ops.CreateForeignKeyOp:
        return ops.CreateForeignKeyOp(
            f"fk_{table}_workflow_id",
            table,
            "workflows",
            ["workflow_id"],
            ["id"],
            ondelete="CASCADE",
        )

    inbox = ("ix_workflow_messages_inbox", "workflow_messages", "workflow_id", "topic", "seq")
    return [
        # MySQL will not change a column a foreign key uses: drop the keys, widen, re-add.
        *(
            ops.DropConstraintOp(
                f"fk_{table}_workflow_id", table, type_="foreignkey", _reverse=foreign_key(table)
            )
            for table in referencing
        ),
        *widen,
        # Served by no statement: every read of the inbox asks for unread messages
        # (ix_workflow_messages_unread), a redelivery is refused by the unique message id.
        ops.DropIndexOp(inbox[0], inbox[1], _reverse=_index(*inbox)),
        *(
            ops.DropIndexOp(name, table, _reverse=_index(name, table, *columns))
            for name, table, columns, _ in narrowed
        ),
        *(_partial(name, table, columns, where) for name, table, columns, where in narrowed),
        *(foreign_key(table) for table in referencing),
    ]


def _v8() -> list[ops.MigrateOperation]:
    return [
        # Streams: each key's values in order (stream_offset 0, 1, ...), written by the body; a row
        # whose value is NULL closes its key. The writing call's step row is written in the
        # same transaction, so a retried body never writes an offset twice.
        _table(
            "workflow_streams",
            sa.Column(
                "workflow_id",
                sa.String(255),
                sa.ForeignKey(
                    "workflows.id", ondelete="CASCADE", name="fk_workflow_streams_workflow_id"
                ),
                primary_key=True,
            ),
            sa.Column("key", sa.String(255), primary_key=True),
            sa.Column("stream_offset", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("value", json_text(), nullable=True),
            sa.Column("written_at", UTCDateTime(), nullable=False),
        ),
        # Updates: a caller's named request to a running workflow and the body's reply.
        # status: pending (sent), taken (the body received it), replied, rejected (its
        # validator refused it, never in the history), dropped (the workflow ended first).
        _table(
            "workflow_updates",
            _serial(),
            _workflow_id("workflow_updates", 255),
            sa.Column("update_id", sa.String(64), nullable=False),
            sa.Column("name", sa.String(200), nullable=False),
            sa.Column("payload", json_text(), nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("reply", json_text(), nullable=True),
            sa.Column("error", json_text(), nullable=True),
            sa.Column("sent_at", UTCDateTime(), nullable=False),
            sa.Column("replied_at", UTCDateTime(), nullable=True),
        ),
        ops.CreateIndexOp(
            "ux_workflow_updates_update_id",
            "workflow_updates",
            ["workflow_id", "update_id"],
            unique=True,
        ),
        _index("ix_workflow_updates_inbox", "workflow_updates", "workflow_id", "name", "seq"),
    ]


def _v9() -> list[ops.MigrateOperation]:
    # Overlap policies: what a tick does while the workflow the schedule started last
    # (latest_id) runs: skip, buffer_one (the tick kept in buffered_tick) or allow_all.
    return [
        ops.AddColumnOp("workflow_schedules", column)
        for column in (
            sa.Column("overlap", sa.String(16), nullable=False, server_default="allow_all"),
            sa.Column("latest_id", sa.String(255), nullable=True),
            sa.Column("buffered_tick", UTCDateTime(), nullable=True),
        )
    ]


def _v10() -> list[ops.MigrateOperation]:
    return [
        # Debounce windows: the run a debounce key's starts collapse into while it has not
        # started (its arguments replaced by each start, its run_at pushed back), when the
        # window opened and the latest it may fire (first_at + max_wait; NULL: no cap).
        _table(
            "workflow_debounces",
            sa.Column("name", sa.String(255), primary_key=True),
            sa.Column("debounce_key", sa.String(255), primary_key=True),
            _workflow_id("workflow_debounces", 255),
            sa.Column("fire_at", UTCDateTime(), nullable=False),
            sa.Column("first_at", UTCDateTime(), nullable=False),
            sa.Column("last_at", UTCDateTime(), nullable=True),
        ),
        _index("ix_workflow_debounces_workflow_id", "workflow_debounces", "workflow_id"),
        # Keyed claims: each key's due rows of a lane in claim order, and the first row of
        # the next key (a skip scan), so one key's backlog is never walked to reach another.
        # Only rows with a key are in it (where partial indexes exist).
        ops.CreateIndexOp(
            "ix_workflows_keyed",
            "workflows",
            [
                "status",
                "queue",
                "name",
                "concurrency_key",
                "priority",
                "run_at",
            ],
            # Only PostgreSQL claims: there, priority descends (the claim's order) and only
            # rows with a key are in it; MySQL's keys hold 3072 bytes, so prefixes there.
            postgresql_ops={"priority": "DESC"},
            postgresql_where=sa.text("concurrency_key IS NOT NULL"),
            sqlite_where=sa.text("concurrency_key IS NOT NULL"),
            mysql_length={"queue": 64, "name": 64, "concurrency_key": 64},
        ),
    ]


def _v11() -> list[ops.MigrateOperation]:
    # Searchable attributes: one row per workflow and name, its value in the column of its
    # type (the others NULL), with a copy of the workflow's created_at so an index of
    # (name, value, created_at) lists a value's workflows newest first without a sort.
    values: list[tuple[str, sa.types.TypeEngine[Any]]] = [
        ("text", sa.String(255)),
        ("number", sa.Double()),
        ("bool", sa.Boolean()),
    ]
    table = "workflow_attributes"
    return [
        _table(
            table,
            sa.Column(
                "workflow_id",
                sa.String(255),
                sa.ForeignKey("workflows.id", ondelete="CASCADE", name=f"fk_{table}_workflow_id"),
                primary_key=True,
            ),
            sa.Column("name", sa.String(64), primary_key=True),
            *(sa.Column(f"value_{kind}", type_, nullable=True) for kind, type_ in values),
            sa.Column("created_at", UTCDateTime(), nullable=False),
        ),
        *(
            _partial(
                f"ix_{table}_{kind}",
                table,
                ("name", f"value_{kind}", "created_at", "workflow_id"),
                f"value_{kind} IS NOT NULL",
            )
            for kind, _ in values
        ),
    ]


VERSIONS: tuple[SchemaVersion, ...] = (
    SchemaVersion(1, "create_durable_workflow_tables", "create the durable workflow tables", _v1),
    SchemaVersion(2, "durable_schema_v2", "record the durable schema version", _v2),
    SchemaVersion(3, "durable_schema_v3", "waiting workflows: parents, messages and events", _v3),
    SchemaVersion(
        4, "durable_schema_v4", "routing: queues, priorities, headers and schedules", _v4
    ),
    SchemaVersion(
        5,
        "durable_schema_v5",
        "concurrent bodies: step paths; every failed try of a step",
        _v5,
    ),
    SchemaVersion(
        6, "durable_schema_v6", "operators: live workers; what ended when, per queue", _v6
    ),
    SchemaVersion(
        7,
        "durable_schema_v7",
        "ids users choose (255 characters); partial indexes, one index dropped",
        _v7,
    ),
    SchemaVersion(8, "durable_schema_v8", "talking to running workflows: streams and updates", _v8),
    SchemaVersion(9, "durable_schema_v9", "schedules: overlap policies and buffered ticks", _v9),
    SchemaVersion(10, "durable_schema_v10", "flow control: debounce windows; keyed claims", _v10),
    SchemaVersion(11, "durable_schema_v11", "searchable attributes, each type indexed", _v11),
)

LATEST = VERSIONS[-1].number
