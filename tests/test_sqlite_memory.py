"""The in-memory SQLite store (``sqlite:///:memory:``) under concurrent use.

It has one connection, which every task shares; each transaction has it to itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

import durable_core
from durable_core import DurableClient, WorkflowHandle, WorkflowStatus, workflow, workflow_step
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore

ITEMS = 5


@workflow_step
async def double(number: int) -> int:
    return 2 * number


@workflow
async def doubled(number: int) -> int:
    return await double(await double(number))


@workflow
async def collects() -> list[int]:
    return sorted([await durable_core.recv("item") for _ in range(ITEMS)])


@pytest.fixture
async def store() -> AsyncIterator[SQLiteStore]:
    """An in-memory SQLite store with the schema applied."""
    store = SQLiteStore("sqlite:///:memory:")
    await store.open()
    await store.apply_schema()
    try:
        yield store
    finally:
        await store.close()


async def test_a_hundred_concurrent_starts_all_land(store: SQLiteStore) -> None:
    client = DurableClient(store)
    ids: list[str] = []

    async def start(number: int) -> None:
        ids.append((await client.start_workflow(doubled, number)).id)

    async with anyio.create_task_group() as group:
        for number in range(100):
            group.start_soon(start, number)
    assert len(set(ids)) == 100
    listed = await store.list_workflows(limit=1000)
    assert sorted(record.id for record in listed) == sorted(ids)


async def test_sends_and_reads_interleaved_with_running_workflows_all_land(
    store: SQLiteStore,
) -> None:
    client = DurableClient(store)
    workers = [await client.start_workflow(doubled, number) for number in range(10)]
    collectors = [await client.start_workflow(collects) for _ in range(6)]
    first, second = WorkflowRunner(store, worker_id="first"), WorkflowRunner(store)
    for handle in collectors:
        assert await first.run_once(handle) is WorkflowStatus.WAITING
    reads = 0

    async def run(runner: WorkflowRunner, handles: list[WorkflowHandle[Any]]) -> None:
        for handle in handles:
            assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED

    async def read() -> None:
        nonlocal reads
        for handle in workers + collectors:
            await store.list_workflows(limit=100)
            await handle.info()
            reads += 1

    async with anyio.create_task_group() as group:
        group.start_soon(run, first, workers[::2])
        group.start_soon(run, second, workers[1::2])
        for handle in collectors:
            for item in range(ITEMS):
                group.start_soon(partial(client.send, handle.id, item, topic="item"))
        group.start_soon(read)
    assert reads == len(workers + collectors)
    for number, worker in enumerate(workers):
        assert await worker.output() == 4 * number
        assert [step.status.value for step in await worker.steps()] == ["succeeded"] * 2
    for collector in collectors:
        assert await first.run_until_complete(collector) is WorkflowStatus.SUCCEEDED
        assert await collector.output() == list(range(ITEMS))


async def test_a_read_nested_in_a_transaction_joins_it(store: SQLiteStore) -> None:
    client = DurableClient(store)
    handle = await client.start_workflow(doubled, 1)
    rename = sa.text("UPDATE workflows SET name = 'renamed' WHERE id = :id")
    started: list[str] = []

    async def start() -> None:
        started.append((await client.start_workflow(doubled, 2)).id)

    async with anyio.create_task_group() as group, store.connector.transaction() as session:
        assert await session.execute(rename, {"id": handle.id}) == 1
        group.start_soon(start)  # waits for the transaction, then lands
        nested = await store.get_workflow(handle.id)
        assert nested is not None and nested.name == "renamed", "it sees the open write"
        assert len(await store.list_workflows()) == 1
    record = await store.get_workflow(handle.id)
    assert record is not None and record.name == "renamed"
    assert sorted(r.id for r in await store.list_workflows()) == sorted([handle.id, *started])
