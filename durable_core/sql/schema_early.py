"""Versions 1 to 7 of the durable schema: the workflow tables, waiting, routing,
concurrent bodies, operators and ids users choose (see
:mod:`durable_core.sql.schema_history`, which lists every version). A released version
never changes."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.operations import ops

from .coltypes import UTCDateTime, json_text
from .schema_ops import DESC, VERSIONS_TABLE, _index, _partial, _serial, _table, _workflow_id


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
