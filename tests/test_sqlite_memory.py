"""The in-memory SQLite store (``sqlite:///:memory:``) under concurrent use and cancellation.

It has one connection, which every task shares; each transaction has it to itself. The
database outlives that connection, and a cancelled query does not lose it.
"""

from __future__ import annotations

import itertools
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


TICKED = anyio.Event()
"""Set once a ticking branch has run a few steps: its sibling fails then."""


@workflow_step
async def tick(number: int) -> int:
    if number == 3:
        TICKED.set()
    return number


@workflow_step
async def fails_once_ticking() -> None:
    await TICKED.wait()
    raise RuntimeError("a sibling fails")


async def ticks_forever() -> None:
    for number in itertools.count():
        await tick(number)


@workflow(max_attempts=1)
async def sibling_fails() -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(ticks_forever)
        await fails_once_ticking()


@workflow(max_attempts=1, timeout=0.2)
async def ticks_past_its_timeout() -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(ticks_forever)
        await ticks_forever()


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


async def test_branches_cancelled_mid_query_leave_every_row(store: SQLiteStore) -> None:
    """A branch cancelled by its sibling's failure, or by the workflow's timeout, is
    cancelled in the middle of its queries: the store's one connection, and every row
    (other workflows' included), stays."""
    global TICKED
    client, run = DurableClient(store), WorkflowRunner(store)
    done = await client.start_workflow(doubled, 1)
    assert await run.run_until_complete(done) is WorkflowStatus.SUCCEEDED
    waiting = await client.start_workflow(collects)
    assert await run.run_once(waiting) is WorkflowStatus.WAITING
    expected = {done.id: WorkflowStatus.SUCCEEDED, waiting.id: WorkflowStatus.WAITING}
    ticked = {True: 0, False: 0}
    for number in range(20):
        TICKED = anyio.Event()
        body, outcome = (
            (sibling_fails, WorkflowStatus.FAILED)
            if number % 2 == 0
            else (ticks_past_its_timeout, WorkflowStatus.CANCELLED)
        )
        handle = await client.start_workflow(body)
        with anyio.fail_after(120):
            assert await run.run_once(handle) is outcome
        expected[handle.id] = outcome
        rows = await store.list_workflows(limit=100)
        assert {row.id: row.status for row in rows} == expected, f"after workflow {number}"
        assert await done.output() == 4
        assert [step.status.value for step in await done.steps()] == ["succeeded"] * 2
        ticked[body is sibling_fails] += sum(
            step.step_name.endswith(".tick") for step in await handle.steps()
        )
    assert ticked[True] >= 10 * 3, "each branch ran steps before its sibling failed"
    assert ticked[False] > 0, "the branches ran steps before their timeout"


async def test_the_database_outlives_a_replaced_connection(store: SQLiteStore) -> None:
    handle = await DurableClient(store).start_workflow(doubled, 1)
    async with store.engine.connect() as connection:
        await connection.invalidate()  # as SQLAlchemy does when it cannot trust it
    assert [record.id for record in await store.list_workflows()] == [handle.id]
    other = SQLiteStore("sqlite:///:memory:")
    await other.open()
    try:
        await other.apply_schema()
        assert await other.list_workflows() == [], "each store has a database of its own"
    finally:
        await other.close()
