"""Schema version 8 (streams and updates) upgrades a version-7 database in place.

On SQLite, PostgreSQL and MariaDB: a version-7 database with rows (a waiting workflow,
a finished one with an event, a worker's row) goes through ``durable migrate`` with
every row kept; the waiting workflow then runs on and writes a stream, and a new one
answers an update, into the new tables.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import durable_core
from durable_core import DurableClient, WorkflowStatus, open_store, workflow
from durable_core.seams.operators import WorkerRecord
from durable_core.seams.store import Streams, Updates, WorkerRegistry
from durable_core.sql.schema import SCHEMA_VERSION, build_metadata
from durable_core.testing import WorkflowRunner
from tests.conftest import drop_postgres_database
from tests.test_schema_upgrade import add_one, database_with_rows, migrate, rows_at, upgraded_flow

pytestmark = pytest.mark.anyio

V7_TABLES = (
    "workflows",
    "workflow_steps",
    "workflow_messages",
    "workflow_events",
    "workflow_attempts",
    "workflow_schedules",
    "workflow_step_tries",
    "workflow_workers",
)
V7 = build_metadata(7)


@workflow
async def streams_after_upgrade(n: int) -> int:
    first = await add_one(n)
    await durable_core.set_event("stage", "waiting")
    extra: int = await durable_core.recv("go")
    await durable_core.write_stream("progress", first + extra)
    await durable_core.close_stream("progress")
    return first + extra


@workflow
async def answers_after_upgrade() -> int:
    req = await durable_core.recv_update("go")
    assert req is not None
    await req.reply(req.payload + 1)
    return int(req.payload)


async def v7_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the version-7 tables (their version-7 columns), in key order."""
    return await rows_at(url, V7, V7_TABLES)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_7_database_is_upgraded_in_place(
    backend: str,
    tmp_path: Path,
    postgres_url: str,
    mysql_url: str,
    effects: Callable[[str], int],
) -> None:
    scratch = tmp_path / "scratch7.db"
    store = await open_store(f"sqlite:///{scratch}")
    now = datetime.now(UTC)
    try:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        waiting = await client.start_workflow_with_id("v7-waiting", streams_after_upgrade, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        await client.send("v7-waiting", 10, topic="go")
        done = await client.start_workflow_with_id("v7-done", upgraded_flow, 2)
        assert await runner.run_until_complete(done) is WorkflowStatus.SUCCEEDED
        assert isinstance(store, WorkerRegistry)
        worker = WorkerRecord("w-7", "host", 1, 4, ("default",), ("x",), 0, now, now, now)
        await store.beat_worker(worker, 60)
    finally:
        await store.close()
    made = await v7_rows(f"sqlite+aiosqlite:///{scratch}")
    assert [len(made[name]) for name in V7_TABLES] == [2, 6, 1, 1, 1, 0, 0, 1]

    url, async_url = await database_with_rows(
        backend, "upgrade_v8", tmp_path, V7, 7, V7_TABLES, made
    )

    try:
        migrated = migrate(url)
        assert migrated.returncode == 0, migrated.stderr
        assert f"schema at version {SCHEMA_VERSION}" in migrated.stdout
        assert await v7_rows(async_url) == made, "every row kept as it was"
        assert migrate(url).returncode == 0  # idempotent
        assert await v7_rows(async_url) == made

        store = await open_store(url)
        try:
            await store.check_schema()
            handle = DurableClient(store).handle("v7-waiting")
            runner = WorkflowRunner(store)
            assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
            assert await handle.output() == 15
            # The new table holds what the body wrote after the upgrade.
            assert isinstance(store, Streams)
            assert [v async for v in handle.read_stream("progress")] == [15]
            # And the updates table, a request and its reply.
            assert isinstance(store, Updates)
            answering = await DurableClient(store).start_workflow(answers_after_upgrade)
            await store.send_update(answering.id, "u1", "go", "41")
            assert await runner.run_until_complete(answering) is WorkflowStatus.SUCCEEDED
            client = DurableClient(store)
            assert await client.update(answering.id, "go", 41, update_id="u1") == 42
        finally:
            await store.close()
    finally:
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert effects("add_one:4") == 1, "the step before the upgrade ran once"
