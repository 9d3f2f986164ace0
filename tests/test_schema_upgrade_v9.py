"""Schema version 9 (schedules' overlap policies) upgrades a version-8 database in place.

On SQLite, PostgreSQL and MariaDB: a version-8 database with rows (a schedule, a
finished workflow, a waiting one that wrote a stream and holds an update) goes
through ``durable migrate`` with every row kept; the schedule then reads as
``allow_all`` with no latest run, takes the buffer-one policy and buffers a trigger
while its latest run waits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import durable_core
from durable_core import DurableClient, Schedule, WorkflowStatus, open_store, workflow
from durable_core.definitions.schedules import Overlap
from durable_core.seams.store import Updates
from durable_core.sql.schema import SCHEMA_VERSION, build_metadata
from durable_core.testing import WorkflowRunner
from tests.conftest import drop_postgres_database
from tests.test_schema_upgrade import add_one, database_with_rows, migrate, rows_at, upgraded_flow

pytestmark = pytest.mark.anyio

PREVIOUS = 8
V8_TABLES = (
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
V8 = build_metadata(PREVIOUS)


@workflow
async def streams_then_waits(n: int) -> int:
    first = await add_one(n)
    await durable_core.write_stream("progress", first)
    extra: int = await durable_core.recv("go")
    return first + extra


async def v8_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the version-8 tables (their version-8 columns), in key order."""
    return await rows_at(url, V8, V8_TABLES)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_8_database_is_upgraded_in_place(
    backend: str,
    tmp_path: Path,
    postgres_url: str,
    mysql_url: str,
    effects: Callable[[str], int],
) -> None:
    scratch = tmp_path / "scratch8.db"
    store = await open_store(f"sqlite:///{scratch}")
    try:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        waiting = await client.start_workflow_with_id("v8-waiting", streams_then_waits, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        assert isinstance(store, Updates)
        await store.send_update("v8-waiting", "u1", "approve", "1")
        done = await client.start_workflow_with_id("v8-done", upgraded_flow, 2)
        assert await runner.run_until_complete(done) is WorkflowStatus.SUCCEEDED
        await client.add_schedule("v8-nightly", upgraded_flow, Schedule("0 3 * * *", args=[1]))
    finally:
        await store.close()
    made = await v8_rows(f"sqlite+aiosqlite:///{scratch}")
    counts = [len(made[name]) for name in V8_TABLES]
    assert counts == [2, 6, 0, 0, 1, 1, 0, 0, 1, 1], counts

    url, async_url = await database_with_rows(
        backend, "upgrade_v9", tmp_path, V8, PREVIOUS, V8_TABLES, made
    )

    try:
        migrated = migrate(url)
        assert migrated.returncode == 0, migrated.stderr
        assert f"schema at version {SCHEMA_VERSION}" in migrated.stdout
        assert await v8_rows(async_url) == made, "every row kept as it was"

        store = await open_store(url)
        try:
            await store.check_schema()
            client = DurableClient(store)
            kept = await client.get_schedule("v8-nightly")
            assert (kept.overlap, kept.latest_id, kept.buffered_tick) == (
                Overlap.ALLOW_ALL,
                None,
                None,
            )
            buffering = dataclasses.replace(kept, overlap=Overlap.BUFFER_ONE)
            assert await store.update_schedule(buffering)
            first = await client.trigger_schedule("v8-nightly")
            assert first is not None
            assert await client.trigger_schedule("v8-nightly") is None, "buffered"
            held = await client.get_schedule("v8-nightly")
            assert held.latest_id == first.id and held.buffered_tick is not None
            # The waiting workflow runs on after the upgrade, its stream kept.
            handle = client.handle("v8-waiting")
            await client.send("v8-waiting", 10, topic="go")
            assert (
                await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
            )
            assert await handle.output() == 15
            assert [v async for v in handle.read_stream("progress")] == [5]
        finally:
            await store.close()
    finally:
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert effects("add_one:4") == 1, "the step before the upgrade ran once"
