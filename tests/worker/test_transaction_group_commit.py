"""Transaction steps under a worker's group commit (issue 36), in the test's own process.

A transaction step commits its own writes, with its record, in its own transaction: it
never waits for a group-commit flush to make them durable. And nothing that depends on it
(the effect after it, the settle) is visible before that transaction committed. Each test
holds a row lock the worker's statements need and reads what the database shows meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from durable_core import (
    AppDatabase,
    DurableClient,
    WorkflowConfig,
    WorkflowContext,
    WorkflowStatus,
    set_event,
    transaction_step,
    workflow,
    workflow_step,
)
from durable_core.runtime.worker import WorkflowWorker
from durable_core.sql.app_database import OUTPUTS_TABLE, close_app_databases
from durable_postgres import PostgresStore
from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.worker.conftest import eventually, plain

pytestmark = pytest.mark.anyio

APP_DDL = (
    "DROP TABLE IF EXISTS orders, stock",
    "CREATE TABLE orders (id text PRIMARY KEY, workflow_id text NOT NULL)",
    "CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)",
    "INSERT INTO stock VALUES ('apple', 10)",
)
GATES: dict[str, anyio.Event] = {}
"""Events the tests' steps wait for, by name (made per test)."""


class Where:
    """The database the transaction step writes to (``None``: the store's own)."""

    database: AppDatabase | None = None


async def _place(conn: AsyncConnection, order: str, linger: float) -> int:
    ctx = WorkflowContext.current()
    assert ctx is not None
    await conn.execute(
        sa.text("INSERT INTO orders (id, workflow_id) VALUES (:id, :wf)"),
        {"id": order, "wf": ctx.workflow_id},
    )
    left = await conn.execute(
        sa.text("UPDATE stock SET qty = qty - 1 WHERE sku = 'apple' RETURNING qty")
    )
    await anyio.sleep(linger)
    return int(left.scalar_one())


async def place(order: str, linger: float = 0.0) -> int:
    step = transaction_step(database=Where.database, name="tests.place")(_place)
    return await step(order, linger)


@workflow_step
async def gate(name: str) -> str:
    await GATES[name].wait()
    return name


@workflow_step
async def double(n: int) -> int:
    return n * 2


@workflow
async def held_open() -> str:
    """The workflow whose settle the test blocks, so the worker's flusher waits."""
    return await gate("held")


@workflow
async def order_flow(order: str, linger: float) -> int:
    left = await place(order, linger)
    await set_event("placed", left)
    return await double(left)


@pytest.fixture(params=["store", "app"])
async def where(
    request: pytest.FixtureRequest, pg: PostgresStore, postgres_url: str
) -> AsyncIterator[str]:
    """The application's tables in the store's database, or in another PostgreSQL one."""
    GATES.clear()
    url = postgres_url
    if request.param == "app":
        url = await fresh_postgres_database(postgres_url, "txs_app_group")
        Where.database = AppDatabase(url)
    await _app_ddl(url)
    try:
        yield request.param
    finally:
        await close_app_databases()
        Where.database = None
        if request.param == "app":
            await drop_postgres_database(url)


@asynccontextmanager
async def worker(store: PostgresStore, **config: Any) -> AsyncIterator[WorkflowWorker]:
    running = WorkflowWorker(store, WorkflowConfig(concurrency=4, poll_interval_ms=50, **config))
    async with anyio.create_task_group() as group:
        group.start_soon(running.run)
        try:
            yield running
        finally:
            running.stop()


@asynccontextmanager
async def locked(url: str, sql: str, *args: Any) -> AsyncIterator[None]:
    """A transaction holding the rows ``sql`` locks (``FOR UPDATE``) until the block ends."""
    conn = await asyncpg.connect(plain(url))
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(sql, *args)
        yield
    finally:
        await transaction.rollback()
        await conn.close()


def app_url(store_url: str) -> str:
    """Where the application's tables are."""
    return store_url if Where.database is None else Where.database.url


async def fetchval(url: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(plain(url))
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


def waits_on_a_lock(sql: asyncpg.Connection, url: str, like: str) -> Callable[[], Awaitable[bool]]:
    """Whether a statement like ``like`` waits on a lock in the database of ``url``."""
    database = plain(url).rsplit("/", 1)[1].split("?")[0]

    async def check() -> bool:
        return bool(
            await sql.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = $1 AND query LIKE $2",
                database,
                like,
            )
        )

    return check


async def status(sql: asyncpg.Connection, workflow_id: str) -> str:
    return str(await sql.fetchval("SELECT status FROM workflows WHERE id = $1", workflow_id))


@asynccontextmanager
async def flusher_blocked(
    client: DurableClient, postgres_url: str, sql: asyncpg.Connection
) -> AsyncIterator[None]:
    """The worker's flusher waits, for the whole block, on a flush carrying the settle of
    ``held_open``, whose row the test keeps locked."""
    GATES["held"] = anyio.Event()
    blocker = await client.start_workflow(held_open)

    async def running() -> bool:
        return await status(sql, blocker.id) == "running"

    await eventually(running, timeout=120, what="held_open to run")
    async with locked(postgres_url, "SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE", blocker.id):
        GATES["held"].set()  # its end and settle go out in one flush, which waits
        flush = waits_on_a_lock(sql, postgres_url, "%unnest%")
        await eventually(flush, timeout=120, what="the flush to wait on the lock")
        yield
    assert await blocker.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED


async def test_a_transaction_step_commits_while_the_group_commit_cannot_flush(
    where: str, pg: PostgresStore, postgres_url: str, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    url = app_url(postgres_url)
    async with worker(pg):
        async with flusher_blocked(client, postgres_url, sql):
            handle = await client.start_workflow(order_flow, "order-1", 0.0)

            async def placed() -> bool:
                return bool(await fetchval(url, "SELECT count(*) FROM orders"))

            # The transaction step's writes commit while every flush waits.
            await eventually(placed, timeout=120, what="the transaction step to commit")
            assert await fetchval(url, "SELECT workflow_id FROM orders") == handle.id
            steps = await sql.fetch(
                "SELECT status, output FROM workflow_steps WHERE workflow_id = $1"
                " AND step_name = 'tests.place'",
                handle.id,
            )
            if where == "store":  # the record is the step's row, committed with the order
                assert [tuple(r) for r in steps] == [("succeeded", "9")]
            else:  # the record is a row of ours beside the order; the step's row follows
                assert steps == []
                recorded = f"SELECT output FROM {OUTPUTS_TABLE} WHERE workflow_id = $1"
                assert await fetchval(url, recorded, handle.id) == "9"
            assert await status(sql, handle.id) == "running", "its settle waits for a flush"
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 18


async def test_nothing_after_a_transaction_step_is_visible_before_it_commits(
    where: str, pg: PostgresStore, postgres_url: str, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    url = app_url(postgres_url)
    async with worker(pg):
        async with locked(url, "SELECT 1 FROM stock WHERE sku = 'apple' FOR UPDATE"):
            handle = await client.start_workflow(order_flow, "order-2", 0.0)
            body = waits_on_a_lock(sql, url, "%UPDATE stock%")
            await eventually(body, timeout=120, what="the transaction to wait on the stock row")
            # Its order is inserted, not committed: nothing after it in the workflow may
            # show, however long the transaction stays open (watched for a second).
            for _ in range(20):
                assert await fetchval(url, "SELECT count(*) FROM orders") == 0
                events = "SELECT count(*) FROM workflow_events WHERE workflow_id = $1"
                assert await sql.fetchval(events, handle.id) == 0
                assert await status(sql, handle.id) == "running"
                await anyio.sleep(0.05)
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    assert await handle.get_event("placed") == 9
    assert await fetchval(url, "SELECT count(*) FROM orders") == 1


async def test_a_long_transaction_steps_running_row_never_lands_over_its_end(
    pg: PostgresStore, postgres_url: str, sql: asyncpg.Connection
) -> None:
    """On the store's own database the step's row is written in its transaction. A long one
    also gets a running row from the group commit; when the flush carrying that row waits,
    the transaction waits for it, so the running row never lands over the end."""
    await _app_ddl(postgres_url)
    client = DurableClient(pg)
    async with worker(pg, step_row_after_ms=20):
        async with flusher_blocked(client, postgres_url, sql):
            handle = await client.start_workflow(order_flow, "order-3", 0.3)
            await anyio.sleep(1.0)  # the body lingers 0.3 s; its running row is due at 20 ms
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    rows = await sql.fetch(
        "SELECT step_name, status, output, attempts FROM workflow_steps"
        " WHERE workflow_id = $1 ORDER BY step_index",
        handle.id,
    )
    assert [tuple(r) for r in rows] == [
        ("tests.place", "succeeded", "9", 1),
        ("durable.set_event", "succeeded", "null", 1),
        ("tests.worker.test_transaction_group_commit.double", "succeeded", "18", 1),
    ]


async def _app_ddl(url: str) -> None:
    conn = await asyncpg.connect(plain(url))
    try:
        for statement in APP_DDL:
            await conn.execute(statement)
    finally:
        await conn.close()
