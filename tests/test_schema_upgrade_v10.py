"""Schema version 10 (debounce windows, the keyed-claim index) upgrades a version-9
database in place.

On SQLite, PostgreSQL and MariaDB: a version-9 database with a row in every table (a
waiting workflow, a finished one with an event, a stream, an update and a step's
failed try, a schedule, a worker's row) goes through ``durable migrate`` with every row kept,
foreign keys included; the waiting workflow then runs on, and a debounced start
writes its window into the new table.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import durable_core
from durable_core import (
    DebounceKey,
    DurableClient,
    Schedule,
    WorkflowStatus,
    open_store,
    workflow,
)
from durable_core.seams.operators import WorkerRecord
from durable_core.seams.store import Updates, WorkerRegistry
from durable_core.sql.schema import SCHEMA_VERSION, build_metadata
from durable_core.testing import WorkflowRunner
from tests.conftest import drop_postgres_database
from tests.test_schema_upgrade import (
    add_one,
    database_with_rows,
    foreign_keys,
    migrate,
    retried_across_upgrade,
    rows_at,
)

pytestmark = pytest.mark.anyio

PREVIOUS = 9
TABLES = (
    "workflows",
    "workflow_steps",
    "workflow_messages",
    "workflow_events",
    "workflow_attempts",
    "workflow_schedules",
    "workflow_step_tries",
    "workflow_workers",
    "workflow_streams",
    "workflow_updates",
)
BEFORE = build_metadata(PREVIOUS)


@workflow
async def waits_across_v10(n: int) -> int:
    first = await add_one(n)
    await durable_core.set_event("stage", "waiting")
    extra: int = await durable_core.recv("go")
    return first + extra


@workflow
async def talked_before_v10() -> int:
    await durable_core.write_stream("progress", 1)
    await durable_core.close_stream("progress")
    req = await durable_core.recv_update("go")
    assert req is not None
    await req.reply(req.payload + 1)
    return int(req.payload)


@workflow
async def debounced_after_v10(n: int) -> int:
    return n


async def previous_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the previous version's tables (its columns), in key order."""
    return await rows_at(url, BEFORE, TABLES)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_9_database_is_upgraded_in_place(
    backend: str,
    tmp_path: Path,
    postgres_url: str,
    mysql_url: str,
    effects: Callable[[str], int],
) -> None:
    scratch = tmp_path / "scratch9.db"
    store = await open_store(f"sqlite:///{scratch}")
    now = datetime.now(UTC)
    try:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        waiting = await client.start_workflow_with_id("v9-waiting", waits_across_v10, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        await client.send("v9-waiting", 10, topic="go")
        talked = await client.start_workflow_with_id("v9-talked", talked_before_v10)
        assert await runner.run_once(talked) is WorkflowStatus.WAITING
        assert isinstance(store, Updates)
        await store.send_update(talked.id, "u1", "go", "41")
        assert await runner.run_until_complete(talked) is WorkflowStatus.SUCCEEDED
        # A step that fails once (an n of this test's own): a row in workflow_step_tries.
        n = 1000 + ["sqlite", "postgresql", "mysql"].index(backend)
        retried = await client.start_workflow_with_id("v9-retried", retried_across_upgrade, n)
        assert await runner.run_until_complete(retried) is WorkflowStatus.SUCCEEDED
        nightly = Schedule("0 3 * * *", args=[1])
        await client.add_schedule("v9-nightly", retried_across_upgrade, nightly)
        assert isinstance(store, WorkerRegistry)
        worker = WorkerRecord("w-9", "host", 1, 4, ("default",), ("x",), 0, now, now, now)
        await store.beat_worker(worker, 60)
    finally:
        await store.close()
    made = await previous_rows(f"sqlite+aiosqlite:///{scratch}")
    assert [name for name in TABLES if not made[name]] == []

    url, async_url = await database_with_rows(
        backend, "upgrade_v10", tmp_path, BEFORE, PREVIOUS, TABLES, made
    )

    try:
        keys = await foreign_keys(async_url, TABLES)
        migrated = migrate(url)
        assert migrated.returncode == 0, migrated.stderr
        assert f"schema at version {SCHEMA_VERSION}" in migrated.stdout
        assert await previous_rows(async_url) == made, "every row kept as it was"
        assert await foreign_keys(async_url, TABLES) == keys, "every foreign key kept"
        assert migrate(url).returncode == 0  # idempotent
        assert await previous_rows(async_url) == made

        store = await open_store(url)
        try:
            await store.check_schema()
            handle = DurableClient(store).handle("v9-waiting")
            runner = WorkflowRunner(store)
            assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
            assert await handle.output() == 15
            # The new table holds a debounce window, whose run takes the last arguments.
            client = DurableClient(store)
            key = DebounceKey("after-upgrade", 60)
            first = await client.start_workflow_debounced(key, debounced_after_v10, 1)
            again = await client.start_workflow_debounced(key, debounced_after_v10, 2)
            assert first.id == again.id
            assert await runner.run_until_complete(first) is WorkflowStatus.SUCCEEDED
            assert await first.output() == 2
        finally:
            await store.close()
    finally:
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert effects("add_one:4") == 1, "the step before the upgrade ran once"
