"""Every settle path logs a record carrying worker_id, workflow_id, attempts, max_attempts;
a worker sums them up at INFO."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator

import anyio
import pytest

from durable_core import (
    DurableClient,
    WorkflowConfig,
    WorkflowContext,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.records import NewWorkflow
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.conftest import drop_postgres_database, fresh_postgres_database

FIELDS = ("worker_id", "workflow_id", "attempts", "max_attempts")
database_path: list[str] = []


@workflow_step
async def ok_step() -> str:
    return "ok"


@workflow
async def succeeds() -> str:
    return await ok_step()


@workflow(max_attempts=2)
async def always_fails() -> None:
    raise RuntimeError("boom")


@workflow_step
async def steal_the_lease() -> None:
    ctx = WorkflowContext.current()
    assert ctx is not None
    with sqlite3.connect(database_path[0]) as conn:
        conn.execute("UPDATE workflows SET lock_token = 'thief' WHERE id = ?", (ctx.workflow_id,))


@workflow
async def loses_its_lease() -> None:
    await steal_the_lease()


def settle_records(caplog: pytest.LogCaptureFixture, workflow_id: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "durable_core.worker" and getattr(r, "workflow_id", None) == workflow_id
    ]


def outcome(record: logging.LogRecord) -> tuple[str, int, int, str]:
    for field in FIELDS:
        assert hasattr(record, field), f"{field} missing from {record.getMessage()!r}"
    return (
        record.__dict__["outcome"],
        record.__dict__["attempts"],
        record.__dict__["max_attempts"],
        record.__dict__["worker_id"],
    )


async def test_every_settle_path_logs_the_worker_fields(
    sqlite_store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    # A success's and a suspension's lines are DEBUG (the worker sums them up at INFO).
    caplog.set_level(logging.DEBUG, logger="durable_core")
    database_path[:] = [str(sqlite_store.engine.url.database)]
    client = DurableClient(sqlite_store)
    runner = WorkflowRunner(
        sqlite_store, WorkflowConfig(retry_backoff_secs=0), worker_id="test-worker"
    )

    ok = await client.start_workflow(succeeds)
    await runner.run_until_complete(ok)
    assert [outcome(r) for r in settle_records(caplog, ok.id)] == [
        ("succeeded", 1, 3, "test-worker")
    ]

    bad = await client.start_workflow(always_fails)
    await runner.run_until_complete(bad)
    assert [outcome(r) for r in settle_records(caplog, bad.id)] == [
        ("retry", 1, 2, "test-worker"),
        ("failed", 2, 2, "test-worker"),
    ]

    await sqlite_store.enqueue(
        [
            NewWorkflow(
                id="unknown-1", name="nowhere.flow", input='{"args":[],"kwargs":{}}', max_attempts=3
            )
        ]
    )
    await runner.run_once("unknown-1")
    [unknown] = settle_records(caplog, "unknown-1")
    assert outcome(unknown) == ("failed", 1, 3, "test-worker")
    assert "nowhere.flow" in unknown.getMessage()

    stolen = await client.start_workflow(loses_its_lease)
    await runner.run_once(stolen)
    assert [outcome(r) for r in settle_records(caplog, stolen.id)] == [
        ("lease_lost", 1, 3, "test-worker")
    ]


@pytest.fixture
async def postgres_store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    """A fresh PostgreSQL database (the store a worker claims from)."""
    base = postgres_url.rsplit("/", 1)[-1].split("?")[0]
    url = await fresh_postgres_database(postgres_url, f"{base}_settle_logs")
    store = PostgresStore(url)
    await store.open()
    try:
        await store.apply_schema()
        yield store
    finally:
        await store.close()
        await drop_postgres_database(url)


async def test_a_worker_logs_a_summary_not_a_line_per_workflow_at_info(
    postgres_store: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """At INFO a worker's log has no line per settled workflow, and its summary (every
    minute, and when it stops) counts how the attempts ended."""
    store = postgres_store
    caplog.set_level(logging.INFO, logger="durable_core")
    handles = [await DurableClient(store).start_workflow(succeeds) for _ in range(3)]
    worker = WorkflowWorker(store, WorkflowConfig(poll_interval_ms=20), worker_id="summing")
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        for handle in handles:
            assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
        worker.stop()
    ids = {handle.id for handle in handles}
    mine = [r for r in caplog.records if r.name == "durable_core.worker"]
    assert not [r for r in mine if getattr(r, "workflow_id", None) in ids]
    [summary] = [r for r in mine if hasattr(r, "ended")]
    assert summary.levelno == logging.INFO
    assert summary.__dict__["ended"] == {"succeeded": 3}
    assert "worker summing: 3 attempts ended" in summary.getMessage()
