"""``MemoryStore`` beyond the contract suite (``tests/contract/test_contract_memory.py``):
what it offers and refuses, its leases under racing tasks and threads, fencing after a
reclaim, no lost wake-up between a suspension and a send, and a workflow using most of
what a body can do, run by ``WorkflowRunner`` on it."""

from __future__ import annotations

import json
import threading
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from durable_core import (
    AppDatabase,
    DurableClient,
    LeaseLostError,
    StoreError,
    WorkflowStatus,
    set_attributes,
    sleep,
    start_workflow,
    transaction_step,
    workflow,
    workflow_step,
    write_stream,
)
from durable_core.caller.backends import store_from_url, url_forms
from durable_core.caller.sync import SyncClient
from durable_core.contract.base import wait_for
from durable_core.contract.support import new_workflow
from durable_core.errors import InvalidDatabaseURLError
from durable_core.memory import Tables
from durable_core.memory import plugin as memory_plugin
from durable_core.seams.attributes import Attributes
from durable_core.seams.compensation_role import Compensations
from durable_core.seams.plugins import plugin_manager
from durable_core.seams.records import Lease, Settlement, WaitKind
from durable_core.seams.roles import ROLES, lacking
from durable_core.seams.store import (
    Claimer,
    Debouncer,
    Erasure,
    OperatorQueries,
    ScheduleOverlaps,
    Streams,
    Updates,
    WorkerRegistry,
    WorkflowStats,
)
from durable_core.seams.transactions import TransactionalStore
from durable_core.testing import MemoryStore, WorkflowRunner
from durable_sqlite import SQLiteStore

pytestmark = pytest.mark.anyio

CAPABILITIES = (
    Streams,
    Updates,
    Debouncer,
    ScheduleOverlaps,
    Erasure,
    OperatorQueries,
    WorkerRegistry,
    WorkflowStats,
    Compensations,
    Attributes,
)


@pytest.fixture
async def store() -> MemoryStore:
    opened = MemoryStore()
    await opened.open()
    return opened


def test_it_offers_what_the_sqlite_store_offers_but_transaction_steps() -> None:
    memory, sqlite = MemoryStore(), SQLiteStore("sqlite:///:memory:")
    assert all(lacking(memory, role) == [] for role in ROLES)
    assert [isinstance(memory, c) for c in CAPABILITIES] == [
        isinstance(sqlite, c) for c in CAPABILITIES
    ]
    assert not isinstance(memory, Claimer) and not isinstance(sqlite, Claimer)
    assert isinstance(sqlite, TransactionalStore) and not isinstance(memory, TransactionalStore)


async def test_a_closed_store_refuses_naming_itself(store: MemoryStore) -> None:
    await store.close()
    with pytest.raises(StoreError, match=r"memory store \w+ is not open"):
        await store.get_workflow("any")
    await store.open()  # what it held is still there
    assert await store.get_workflow("any") is None


async def test_racing_tasks_on_two_instances_take_one_lease(store: MemoryStore) -> None:
    other = MemoryStore(tables=store.tables)
    await other.open()
    row = new_workflow()
    await store.enqueue([row])
    won = []

    async def take(on: MemoryStore, worker: str) -> None:
        claimed = await on.acquire(row.id, worker_id=worker, lease_seconds=30)
        if claimed is not None:
            won.append(claimed)

    async with anyio.create_task_group() as group:
        for i in range(40):
            group.start_soon(take, store if i % 2 else other, f"w{i}")
    [winner] = won
    record = await store.get_workflow(row.id)
    assert record is not None and (record.attempts, record.locked_by) == (1, winner.lease.worker_id)


T = TypeVar("T")


def on_a_thread_of_its_own(work: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(work)`` on a new thread: this one may hold the event loop the test
    session's async fixtures run on."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(anyio.run(work))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return done[0]


def test_threads_on_their_own_event_loops_take_one_lease() -> None:
    tables = Tables()
    row = new_workflow()
    won: list[str] = []
    ready = threading.Barrier(8)

    async def enqueue() -> None:
        async with MemoryStore(tables=tables) as store:
            await store.enqueue([row])

    async def take(worker: str) -> None:
        async with MemoryStore(tables=tables) as store:
            ready.wait()
            for _ in range(50):  # each thread keeps trying while the others do
                if await store.acquire(row.id, worker_id=worker, lease_seconds=30):
                    won.append(worker)

    on_a_thread_of_its_own(enqueue)
    threads = [threading.Thread(target=anyio.run, args=(take, f"t{i}")) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1


async def test_a_reclaimed_lease_fences_every_write_of_its_old_holder(store: MemoryStore) -> None:
    row = new_workflow()
    await store.enqueue([row])
    old = await store.acquire(row.id, worker_id="a", lease_seconds=0.05)
    assert old is not None
    await store.start_step(old.lease, 0, "s", '"in"')
    await anyio.sleep(0.15)
    new = await store.acquire(row.id, worker_id="b", lease_seconds=30)
    assert new is not None and new.crashed is not None and new.crashed.worker_id == "a"
    assert new.attempts == 2 and new.steps is not None and len(new.steps) == 1
    writes = [
        store.complete_step(old.lease, 0, '"late"'),
        store.start_step(old.lease, 1, "s", '"in"'),
        store.heartbeat(old.lease, 30),
        store.set_event(old.lease, "k", '"v"'),
        store.settle(Settlement(old.lease, WorkflowStatus.SUCCEEDED, output='"late"')),
        store.suspend(old.lease, [wait_for(WaitKind.SLEEP)]),
    ]
    for write in writes:
        with pytest.raises(LeaseLostError):
            await write
    [step] = await store.load_steps(row.id)
    assert (step.status.value, step.output) == ("running", None)
    await store.settle(Settlement(new.lease, WorkflowStatus.SUCCEEDED, output='"b"'))
    record = await store.get_workflow(row.id)
    assert record is not None and (record.status, record.output) == (
        WorkflowStatus.SUCCEEDED,
        '"b"',
    )


async def test_a_send_racing_a_suspension_is_never_lost(store: MemoryStore) -> None:
    async def suspend(lease: Lease, outcome: list[bool]) -> None:
        outcome.append(await store.suspend(lease, [wait_for(WaitKind.MESSAGE, "go")]))

    for i in range(30):
        row = new_workflow()
        await store.enqueue([row])
        claimed = await store.acquire(row.id, worker_id="w", lease_seconds=30)
        assert claimed is not None
        outcome: list[bool] = []
        async with anyio.create_task_group() as group:
            if i % 2:
                group.start_soon(suspend, claimed.lease, outcome)
            group.start_soon(store.send, row.id, "go", '"x"', f"m{i}")
            if not i % 2:
                group.start_soon(suspend, claimed.lease, outcome)
        record = await store.get_workflow(row.id)
        assert record is not None
        # Either the suspension saw the message (and stayed running), or the send woke it.
        assert (outcome, record.status) in (
            ([False], WorkflowStatus.RUNNING),
            ([True], WorkflowStatus.PENDING),
        )


@transaction_step
async def on_the_store(conn: AsyncConnection) -> int:
    return 1


@workflow(name="tests.memory.tx")
async def uses_the_store_database() -> int:
    return await on_the_store()


async def test_a_transaction_step_on_the_store_database_is_refused_naming_the_way_out(
    store: MemoryStore,
) -> None:
    handle = await DurableClient(store).start_workflow(uses_the_store_database)
    assert await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = json.loads((await handle.info()).error or "{}")
    assert error["type"].endswith("TransactionStepError")
    assert "cannot run transaction steps" in error["message"]
    assert "database=AppDatabase(url)" in error["message"]


async def test_a_transaction_step_on_an_app_database_runs_beside_it(
    store: MemoryStore, tmp_path: Path
) -> None:
    shop = AppDatabase(f"sqlite:///{tmp_path / 'shop.db'}")

    @transaction_step(database=shop, name="tests.memory.order")
    async def order(conn: AsyncConnection, cents: int) -> int:
        await conn.execute(sa.text("INSERT INTO orders (cents) VALUES (:c)"), {"c": cents})
        return cents

    @workflow(name="tests.memory.orders")
    async def orders() -> int:
        return await order(5) + await order(7)

    async with shop:
        async with shop.transaction(None, "read committed") as made:
            await made.connection.execute(sa.text("CREATE TABLE orders (cents INT)"))
        handle = await DurableClient(store).start_workflow(orders)
        assert await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        async with shop.transaction(None, "read committed") as reading:
            rows = await reading.connection.execute(sa.text("SELECT cents FROM orders"))
            assert sorted(r.cents for r in rows) == [5, 7]
    assert await handle.output() == 12
    assert [s.step_name for s in await store.load_steps(handle.id)] == [
        "tests.memory.order",
        "tests.memory.order",
    ]


@workflow_step
async def double(n: int) -> int:
    return n * 2


@workflow(name="tests.memory.child")
async def child(n: int) -> int:
    await sleep(timedelta(hours=1))
    return await double(n)


@workflow(name="tests.memory.parent")
async def parent(n: int) -> int:
    await set_attributes(customer="acme", amount=n)
    await sleep(timedelta(days=3))
    kid = await start_workflow(child, n)
    got = await kid.output()
    await write_stream("progress", got)
    return got + 1


async def test_the_runner_runs_timers_children_streams_and_attributes_on_it(
    store: MemoryStore,
) -> None:
    client = DurableClient(store)
    handle = await client.start_workflow(parent, 20)
    runner = WorkflowRunner(store)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 41
    assert runner.clock.offset > timedelta(days=3, minutes=59)  # both sleeps skipped
    [kid] = await store.list_workflows(parent_id=handle.id)
    assert (kid.name, kid.status) == ("tests.memory.child", WorkflowStatus.SUCCEEDED)
    page = await store.read_stream(handle.id, "progress")
    assert page.entries == [(0, "40")]
    found = await client.list_workflows(attributes={"customer": "acme", "amount": 20})
    assert [r.id for r in found] == [handle.id]
    erased = await client.erase(handle.id)
    assert erased > 0 and await store.get_attributes(handle.id) == {}


@pytest.fixture
def memory_urls() -> None:
    """``memory://`` URLs resolved, as the entry point ``pyproject.toml`` declares makes them
    (an install made before it was declared lacks it: the plugin is then registered here)."""
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    declared = pyproject["project"]["entry-points"]["durable_core"]["memory"]
    assert declared == memory_plugin.__name__
    if plugin_manager().get_plugin("memory") is None:
        plugin_manager().register(memory_plugin, name="memory")


@pytest.mark.usefixtures("memory_urls")
def test_a_memory_url_is_a_private_or_a_named_database() -> None:
    assert {"memory://", "memory://NAME"} <= set(url_forms())
    one, two = store_from_url("memory://"), store_from_url("memory://")
    assert isinstance(one, MemoryStore) and isinstance(two, MemoryStore)
    assert one.tables is not two.tables
    name = f"memory://shared-{uuid.uuid4().hex[:8]}"
    first, second = store_from_url(name), store_from_url(name)
    assert isinstance(first, MemoryStore) and isinstance(second, MemoryStore)
    assert first.tables is second.tables and first.description == second.description
    for bad in ("memory://a/b", "memory://x?y=1", "memory:x"):
        with pytest.raises(InvalidDatabaseURLError, match="memory"):
            store_from_url(bad)


@workflow(name="tests.memory.greet")
async def greet(name: str) -> str:
    return f"hello {name}"


@pytest.mark.usefixtures("memory_urls")
def test_a_sync_client_and_a_runner_share_a_named_memory_database() -> None:
    url = f"memory://sync-{uuid.uuid4().hex[:8]}"
    with SyncClient(url) as client:  # its store runs on a loop of its own, on a thread
        handle = client.start_workflow(greet, "ada")

        async def run() -> WorkflowStatus:
            store = store_from_url(url)
            return await WorkflowRunner(store).run_until_complete(handle.id)

        assert on_a_thread_of_its_own(run) is WorkflowStatus.SUCCEEDED
        assert client.handle(handle.id).output() == "hello ada"
