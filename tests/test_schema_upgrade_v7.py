"""Schema version 7 (ids of 255 characters, partial indexes) upgrades a version-6 database
in place on SQLite, PostgreSQL and MariaDB, every row kept, the foreign keys included.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from durable_core import (
    DurableClient,
    WorkflowStatus,
    open_store,
    start_workflow,
    start_workflow_with_id,
    workflow,
)
from durable_core.definitions.schedules import ScheduleRecord
from durable_core.seams.operators import WorkerRecord
from durable_core.seams.store import WorkerRegistry
from durable_core.sql import migrations
from durable_core.sql.schema import SCHEMA_VERSION, build_metadata
from durable_core.testing import WorkflowRunner
from tests.conftest import drop_postgres_database
from tests.test_schema_upgrade import (
    FAILED_ONCE,
    _database_at,
    migrate,
    retried_across_upgrade,
    rows_at,
    upgraded_flow,
    waits_for_go,
)

V6 = build_metadata(6)
V6_TABLES = [table.name for table in V6.sorted_tables if table.name != "durable_schema_versions"]
LONG = "order-" + "7" * 249


@workflow
async def parent_of(n: int) -> int:
    child = await start_workflow(upgraded_flow, n)
    return await child.output()


@workflow
async def long_parent(n: int) -> int:
    child = await start_workflow_with_id(LONG[:-1] + "c", upgraded_flow, n)
    return await child.output()


async def v6_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the version-6 tables (their version-6 columns), in key order."""
    return await rows_at(url, V6, V6_TABLES)


def _keys_and_indexes(conn: sa.Connection) -> dict[str, tuple[set[Any], set[str]]]:
    """Per table: its foreign keys (name, columns, referred table, on delete) and index names."""
    inspector = sa.inspect(conn)
    found = {}
    for name in V6_TABLES:
        keys = {
            (k["name"], tuple(k["constrained_columns"]), k["referred_table"])
            for k in inspector.get_foreign_keys(name)
        }
        found[name] = (keys, {ix["name"] for ix in inspector.get_indexes(name) if ix["name"]})
    return found


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_6_database_is_upgraded_in_place(
    backend: str,
    tmp_path: Path,
    postgres_url: str,
    mysql_url: str,
    effects: Callable[[str], int],
) -> None:
    """Rows in every version-6 table (a parent waiting on its child, a workflow waiting on
    a message it was sent, one whose step failed a try, a finished one, a schedule, a
    worker) are kept by ``durable migrate``, with their foreign keys; the workflows then run
    to the end, and the upgraded tables take an id of 255 characters and its child."""
    FAILED_ONCE.clear()
    scratch = f"sqlite:///{tmp_path / 'scratch6.db'}"
    now = datetime.now(UTC)
    store = await open_store(scratch)
    try:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        parent = await client.start_workflow_with_id("v6-parent", parent_of, 1)
        assert await runner.run_once(parent) is WorkflowStatus.WAITING
        waiting = await client.start_workflow_with_id("v6-waiting", waits_for_go, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        await client.send("v6-waiting", 10, topic="go")
        retrying = await client.start_workflow_with_id("v6-retrying", retried_across_upgrade, 1)
        assert await runner.run_once(retrying) is WorkflowStatus.PENDING
        done = await client.start_workflow_with_id("v6-done", upgraded_flow, 2)
        assert await runner.run_until_complete(done) is WorkflowStatus.SUCCEEDED
        assert await store.add_schedule(
            ScheduleRecord(
                name="v6-nightly",
                workflow_name=upgraded_flow.name,
                cron="0 3 * * *",
                timezone="UTC",
                input='{"args":[1],"kwargs":{}}',
                queue="nightly",
                paused=False,
                catch_up=0,
                next_tick=now + timedelta(days=1),
                last_tick=None,
                created_at=now,
                updated_at=now,
            )
        )
        assert isinstance(store, WorkerRegistry)
        await store.beat_worker(
            WorkerRecord("w-6", "host", 1, 4, ("default",), (parent_of.name,), 0, now, now, now),
            3600,
        )
    finally:
        await store.close()
    made = await v6_rows(f"sqlite+aiosqlite:///{tmp_path / 'scratch6.db'}")
    assert {name: len(rows) for name, rows in made.items()} == {
        "workflows": 5,
        "workflow_steps": 10,
        "workflow_messages": 1,
        "workflow_events": 1,
        "workflow_attempts": 2,
        "workflow_schedules": 1,
        "workflow_step_tries": 1,
        "workflow_workers": 1,
    }, "a row in every table"

    url, async_url = await _database_at(backend, "upgrade_v6", tmp_path)
    engine = create_async_engine(async_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(migrations.upgrade, 6)
            for name in V6_TABLES:
                table = V6.tables[name]
                rows = [{k: v for k, v in row.items() if k != "seq"} for row in made[name]]
                await conn.execute(table.insert(), rows)
        async with engine.connect() as conn:
            before = await conn.run_sync(_keys_and_indexes)
    finally:
        await engine.dispose()

    migrated = migrate(url)
    assert migrated.returncode == 0, migrated.stderr
    assert f"schema at version {SCHEMA_VERSION}" in migrated.stdout
    assert await v6_rows(async_url) == made, "every row kept as it was"
    assert migrate(url).returncode == 0  # idempotent
    assert await v6_rows(async_url) == made

    engine = create_async_engine(async_url)
    try:
        async with engine.connect() as conn:
            after = await conn.run_sync(_keys_and_indexes)
    finally:
        await engine.dispose()
    latest = build_metadata()
    for name in V6_TABLES:
        assert after[name][0] == before[name][0], f"{name}: the same foreign keys"
        wanted = {ix.name for ix in latest.tables[name].indexes}
        assert wanted <= after[name][1], name
    assert "ix_workflow_messages_inbox" in before["workflow_messages"][1]
    assert "ix_workflow_messages_inbox" not in after["workflow_messages"][1]
    assert len(after["workflow_steps"][0]) == 1, "workflow_steps references workflows"

    store = await open_store(url)
    try:
        await store.check_schema()
        runner = WorkflowRunner(store)
        [child] = [row["id"] for row in made["workflows"] if row["parent_id"] == "v6-parent"]
        assert await runner.run_until_complete(child) is WorkflowStatus.SUCCEEDED
        for workflow_id, expected in (
            ("v6-parent", (1 + 1) * 2 - 3),
            ("v6-waiting", (4 + 1 + 10) * 2),
            ("v6-retrying", 20),
        ):
            assert await runner.run_until_complete(workflow_id) is WorkflowStatus.SUCCEEDED
            record = await store.get_workflow(workflow_id)
            assert record is not None and record.output == str(expected)
        # The widened columns take an id of 255 characters, its child pointing back to it.
        assert len(LONG) == 255
        client = DurableClient(store)
        await client.start_workflow_with_id(LONG, long_parent, 5)
        assert await runner.run_once(LONG) is WorkflowStatus.WAITING
        assert await runner.run_until_complete(LONG[:-1] + "c") is WorkflowStatus.SUCCEEDED
        assert await runner.run_until_complete(LONG) is WorkflowStatus.SUCCEEDED
        assert (await client.get(LONG[:-1] + "c")).parent_id == LONG
        assert await client.handle(LONG).output() == (5 + 1) * 2 - 3
    finally:
        await store.close()
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert effects("add_one:4") == 1
