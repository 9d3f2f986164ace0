"""Every version of the durable schema, as the Alembic operations that make it.

This history is the schema's single definition: :mod:`durable_core.sql.schema`
builds its tables by replaying it, ``apply_schema()`` / ``durable migrate``
run the operations a database lacks, and ``durable alembic`` renders each
version as a revision file. A released version never changes; a new release
appends a version.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.operations import ops

from .coltypes import UTCDateTime, json_text
from .schema_early import _v1, _v2, _v3, _v4, _v5, _v6, _v7
from .schema_ops import (
    DESC,
    NOT_ON_SQLITE,
    VERSIONS_TABLE,
    SchemaVersion,
    _index,
    _partial,
    _serial,
    _table,
    _workflow_id,
    index_columns,
)

__all__ = [
    "DESC",
    "LATEST",
    "NOT_ON_SQLITE",
    "VERSIONS",
    "VERSIONS_TABLE",
    "SchemaVersion",
    "index_columns",
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


def _v12() -> list[ops.MigrateOperation]:
    # Liveness by session: the advisory lock a worker holds on a database session of its
    # own for as long as it lives (NULL: it holds none, its liveness is its expires_at), and
    # when the server holding that lock started (a lock taken before a restart proves
    # nothing: every session ended with it). Every worker's check for dead workers walks
    # the rows that name a session, and only those.
    return [
        *(
            ops.AddColumnOp("workflow_workers", column)
            for column in (
                sa.Column("session_key", sa.Integer, nullable=True),
                sa.Column("session_epoch", UTCDateTime(), nullable=True),
            )
        ),
        _partial(
            "ix_workflow_workers_session",
            "workflow_workers",
            ("session_key",),
            "session_key IS NOT NULL",
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
    SchemaVersion(
        12, "durable_schema_v12", "crash recovery: a worker lives as long as its session", _v12
    ),
)

LATEST = VERSIONS[-1].number
