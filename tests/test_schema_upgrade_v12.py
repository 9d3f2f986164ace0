"""Schema version 12 (a worker lives as long as its session) upgrades a version-11 database
in place.

On SQLite, PostgreSQL and MariaDB: a version-11 database with rows (a waiting workflow,
a finished one, a worker's row, attributes) goes through ``durable migrate`` with every
row kept; the worker's row names no liveness session (its liveness is its lease, as
before). On PostgreSQL a worker then holds a session, its row names it, and once the
session ends its lease on a workflow is ended for the next claim; elsewhere nothing is
ever found dead.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

import durable_core
from durable_core import DurableClient, WorkflowStatus, open_store, workflow
from durable_core.definitions.queues import Queue, Route
from durable_core.seams.operators import WorkerRecord
from durable_core.seams.store import Claimer, WorkerLiveness, WorkerRegistry
from durable_core.sql.schema import SCHEMA_VERSION, build_metadata
from durable_core.testing import WorkflowRunner
from tests.conftest import drop_postgres_database
from tests.test_schema_upgrade import (
    add_one,
    database_with_rows,
    migrate,
    rows_at,
    upgraded_flow,
)

pytestmark = pytest.mark.anyio

PREVIOUS = 11
TABLES = (
    "workflows",
    "workflow_steps",
    "workflow_messages",
    "workflow_attempts",
    "workflow_workers",
    "workflow_attributes",
)
BEFORE = build_metadata(PREVIOUS)


@workflow
async def waits_across_upgrade(n: int) -> int:
    first = await add_one(n)
    await durable_core.set_attributes(customer="acme")
    extra: int = await durable_core.recv("go")
    return first + extra


async def previous_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the previous version's tables (its columns), in key order."""
    return await rows_at(url, BEFORE, TABLES)


async def session_columns(url: str) -> list[tuple[Any, Any]]:
    """``(session_key, session_epoch)`` of every worker's row."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.text("SELECT session_key, session_epoch FROM workflow_workers")
            )
            return [(row[0], row[1]) for row in rows]
    finally:
        await engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_11_database_is_upgraded_in_place(
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
        waiting = await client.start_workflow_with_id("v11-waiting", waits_across_upgrade, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        await client.send("v11-waiting", 10, topic="go")
        done = await client.start_workflow_with_id("v11-done", upgraded_flow, 2)
        assert await runner.run_until_complete(done) is WorkflowStatus.SUCCEEDED
        assert isinstance(store, WorkerRegistry)
        worker = WorkerRecord("w-11", "host", 1, 4, ("default",), ("x",), 0, now, now, now)
        await store.beat_worker(worker, 60)
    finally:
        await store.close()
    made = await previous_rows(f"sqlite+aiosqlite:///{scratch}")
    assert [len(made[name]) for name in TABLES] == [2, 6, 1, 1, 1, 1]

    url, async_url = await database_with_rows(
        backend, "upgrade_v12", tmp_path, BEFORE, PREVIOUS, TABLES, made
    )
    try:
        migrated = migrate(url)
        assert migrated.returncode == 0, migrated.stderr
        assert f"schema at version {SCHEMA_VERSION}" in migrated.stdout
        assert await previous_rows(async_url) == made, "every row kept as it was"
        assert migrate(url).returncode == 0  # idempotent
        assert await previous_rows(async_url) == made
        assert await session_columns(async_url) == [(None, None)], "no session named"

        store = await open_store(url)
        try:
            await store.check_schema()
            handle = DurableClient(store).handle("v11-waiting")
            assert await WorkflowRunner(store).run_until_complete(handle) is (
                WorkflowStatus.SUCCEEDED
            )
            assert await handle.output() == 15
            assert isinstance(store, WorkerRegistry)
            await store.beat_worker(worker, 60)
            if backend == "postgresql":
                await a_session_is_named_and_its_end_found(store, worker, async_url)
            else:
                assert not isinstance(store, WorkerLiveness)
                assert await store.end_dead_leases() == {}  # type: ignore[attr-defined]
                assert await session_columns(async_url) == [(None, None)]
        finally:
            await store.close()
    finally:
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert effects("add_one:4") == 1, "the step before the upgrade ran once"


async def a_session_is_named_and_its_end_found(
    store: object, worker: WorkerRecord, async_url: str
) -> None:
    """On the upgraded PostgreSQL database: ``worker`` holds a session, its row names it, a
    workflow it leases is taken over once the session ends."""
    assert isinstance(store, WorkerLiveness) and isinstance(store, WorkerRegistry)
    assert isinstance(store, Claimer)
    flow = await DurableClient(store).start_workflow(upgraded_flow, 1)  # type: ignore[arg-type]
    routes = [Route(Queue("default"), (upgraded_flow.name,), 10)]
    async with anyio.create_task_group() as group:
        held = anyio.CancelScope()

        async def hold(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with held:
                await store.hold_liveness(worker.worker_id, task_status=task_status)

        await group.start(hold)
        await store.beat_worker(worker, 60)
        [(key, epoch)] = await session_columns(async_url)
        assert key is not None and epoch is not None
        [claimed] = await store.claim(
            worker_id=worker.worker_id, limit=1, lease_seconds=300, routes=routes
        )
        assert claimed.id == flow.id
        assert await store.end_dead_leases() == {}
        held.cancel()
    assert await store.end_dead_leases() == {worker.worker_id: 1}
    [taken] = await store.claim(worker_id="w-12", limit=1, lease_seconds=30, routes=routes)
    assert taken.id == flow.id and taken.attempts == 2
