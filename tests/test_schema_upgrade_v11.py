"""Schema version 11 (searchable attributes) upgrades a version-10 database in place.

On SQLite, PostgreSQL and MariaDB: a version-10 database with rows (a waiting workflow
that wrote a stream, a finished one, an answered update, a worker's row, a schedule
with an overlap policy, a debounce window) goes through
``durable migrate`` with every row kept; the new table references its workflows, the
waiting workflow then runs on and sets attributes, and a list finds it by them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import durable_core
from durable_core import (
    AttributeRange,
    DebounceKey,
    DurableClient,
    Schedule,
    WorkflowStatus,
    open_store,
    workflow,
)
from durable_core.definitions.schedules import Overlap
from durable_core.seams.operators import WorkerRecord
from durable_core.seams.store import WorkerRegistry
from durable_core.sql.schema import SCHEMA_VERSION, build_metadata
from durable_core.testing import WorkflowRunner
from tests.conftest import drop_postgres_database
from tests.test_schema_upgrade import (
    add_one,
    database_with_rows,
    foreign_keys,
    migrate,
    rows_at,
    upgraded_flow,
)

pytestmark = pytest.mark.anyio

PREVIOUS = 10
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
    "workflow_debounces",
)
BEFORE = build_metadata(PREVIOUS)


@workflow
async def tags_after_upgrade(n: int) -> int:
    first = await add_one(n)
    await durable_core.write_stream("progress", first)
    extra: int = await durable_core.recv("go")
    await durable_core.set_attributes(customer="acme", amount=first + extra)
    return first + extra


@workflow
async def answers_before_upgrade() -> int:
    req = await durable_core.recv_update("go")
    assert req is not None
    await req.reply(req.payload + 1)
    return int(req.payload)


async def previous_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the previous version's tables (its columns), in key order."""
    return await rows_at(url, BEFORE, TABLES)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_10_database_is_upgraded_in_place(
    backend: str,
    tmp_path: Path,
    postgres_url: str,
    mysql_url: str,
    effects: Callable[[str], int],
) -> None:
    scratch = tmp_path / "scratch.db"
    store = await open_store(f"sqlite:///{scratch}")
    now = datetime.now(UTC)
    try:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        waiting = await client.start_workflow_with_id("v10-waiting", tags_after_upgrade, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        await client.send("v10-waiting", 10, topic="go")
        done = await client.start_workflow_with_id("v10-done", upgraded_flow, 2)
        assert await runner.run_until_complete(done) is WorkflowStatus.SUCCEEDED
        answering = await client.start_workflow_with_id("v10-answered", answers_before_upgrade)
        assert await runner.run_once(answering) is WorkflowStatus.WAITING
        await store.send_update(answering.id, "u1", "go", "41")  # type: ignore[attr-defined]
        assert await runner.run_until_complete(answering) is WorkflowStatus.SUCCEEDED
        assert isinstance(store, WorkerRegistry)
        worker = WorkerRecord("w-10", "host", 1, 4, ("default",), ("x",), 0, now, now, now)
        await store.beat_worker(worker, 60)
        nightly = Schedule("0 3 * * *", args=[1], overlap=Overlap.SKIP)
        await client.add_schedule("v10-nightly", upgraded_flow, nightly)
        await client.start_workflow_debounced(DebounceKey("v10-key", 3600), upgraded_flow, 3)
    finally:
        await store.close()
    made = await previous_rows(f"sqlite+aiosqlite:///{scratch}")
    assert [len(made[name]) for name in TABLES] == [4, 8, 1, 0, 2, 1, 0, 1, 1, 1, 1]

    url, async_url = await database_with_rows(
        backend, "upgrade_v11", tmp_path, BEFORE, PREVIOUS, TABLES, made
    )

    try:
        migrated = migrate(url)
        assert migrated.returncode == 0, migrated.stderr
        assert f"schema at version {SCHEMA_VERSION}" in migrated.stdout
        assert await previous_rows(async_url) == made, "every row kept as it was"
        assert migrate(url).returncode == 0  # idempotent
        assert await previous_rows(async_url) == made
        [(_, columns, referred, to)] = (await foreign_keys(async_url, ["workflow_attributes"]))[
            "workflow_attributes"
        ]
        assert (columns, referred, to) == (("workflow_id",), "workflows", ("id",))

        store = await open_store(url)
        try:
            await store.check_schema()
            client = DurableClient(store)
            handle = client.handle("v10-waiting")
            assert await WorkflowRunner(store).run_until_complete(handle) is (
                WorkflowStatus.SUCCEEDED
            )
            assert await handle.output() == 15
            assert await handle.attributes() == {"amount": 15, "customer": "acme"}
            found = await client.list_workflows(
                attributes={"customer": "acme", "amount": AttributeRange(10, 20)}
            )
            assert [r.id for r in found] == ["v10-waiting"]
            # A workflow from before the upgrade takes attributes from a caller.
            await client.set_attributes("v10-done", customer="acme")
            found = await client.list_workflows(attributes={"customer": "acme"})
            assert {r.id for r in found} == {"v10-waiting", "v10-done"}
        finally:
            await store.close()
    finally:
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert effects("add_one:4") == 1, "the step before the upgrade ran once"
