"""The connections the flusher and the claim loop keep: one backend serves statement after
statement, a statement sent while one is in flight takes the pool, a connection lost or
cancelled under a statement is replaced by the next, and a pool too small to spare one
keeps none."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import asyncpg
import pytest
import sqlalchemy as sa

from durable_core.errors import StoreUnavailableError
from durable_postgres import PostgresStore
from durable_postgres.connector import AsyncpgConnector, HeldConnection, usable
from tests.worker.conftest import eventually

pytestmark = pytest.mark.anyio

BACKEND = sa.select(sa.func.pg_backend_pid().label("pid"))
SLEEP = sa.select(sa.func.pg_sleep(sa.bindparam("seconds", type_=sa.Float())).label("slept"))


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(postgres_url) as store:
        yield store


async def pid(fetcher: HeldConnection | AsyncpgConnector) -> int:
    [row] = await fetcher.fetch(BACKEND)
    return int(row["pid"])


async def test_one_backend_serves_a_held_connections_statements(store: PostgresStore) -> None:
    held = store.connector.held()
    assert isinstance(held, HeldConnection)
    first = await pid(held)
    assert [await pid(held) for _ in range(5)] == [first] * 5
    async with store.connector.pool.acquire() as conn:
        assert await conn.fetchval("SELECT pg_backend_pid()") != first, (
            "the held connection is not in the pool while held"
        )


async def test_a_statement_sent_while_one_is_in_flight_takes_the_pool(
    store: PostgresStore,
) -> None:
    held = store.connector.held()
    assert isinstance(held, HeldConnection)
    mine = await pid(held)
    seen: list[int] = []

    async def slow() -> None:
        await held.fetch(SLEEP, {"seconds": 0.3})

    async with anyio.create_task_group() as group:
        group.start_soon(slow)
        while not held.busy:  # the other task's statement starts
            await anyio.lowlevel.checkpoint()
        seen.append(await pid(held))
    assert seen and seen[0] != mine
    assert await pid(held) == mine, "the held connection is kept after the statement"


async def test_a_connection_killed_under_it_fails_one_statement_and_the_next_reconnects(
    store: PostgresStore, postgres_url: str
) -> None:
    held = store.connector.held()
    assert isinstance(held, HeldConnection)
    victim = await pid(held)
    admin = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        # Killed while a statement runs on it: that statement fails, the next reconnects.
        async with anyio.create_task_group() as tasks:

            async def sleep_on_it() -> None:
                with pytest.raises(StoreUnavailableError):
                    await store._fetch("held", SLEEP, {"seconds": 30}, on=held)

            tasks.start_soon(sleep_on_it)

            async def sleeping() -> bool:
                query = "SELECT query FROM pg_stat_activity WHERE pid = $1"
                return "pg_sleep" in (await admin.fetchval(query, victim) or "")

            await eventually(sleeping, timeout=120, what="the statement to run")
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", victim)
        second = await pid(held)
        assert second != victim
        # Killed while idle: once the client has seen its session end, the next statement
        # takes another connection instead of failing on it.
        kept = held._conn
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", second)

        async def seen_ended() -> bool:
            return not usable(kept)

        await eventually(seen_ended, timeout=120, what="the client to see its session end")
        assert await pid(held) not in (victim, second)
    finally:
        await admin.close()


async def test_a_statement_cancelled_in_flight_is_cancelled_on_the_server(
    store: PostgresStore, postgres_url: str
) -> None:
    held = store.connector.held()
    assert isinstance(held, HeldConnection)
    await pid(held)
    with anyio.move_on_after(0.2) as scope:
        await held.fetch(SLEEP, {"seconds": 30})
    assert scope.cancelled_caught
    assert not held.busy
    assert await pid(held) > 0, "the next statement runs"
    admin = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        sleeping = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE '%pg_sleep(%::FLOAT)%' AND state = 'active' AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    assert sleeping == 0, "the server stopped the cancelled statement"


async def test_closing_the_store_gives_held_connections_back(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    await store.open()
    held = store.connector.held()
    assert isinstance(held, HeldConnection)
    await pid(held)
    pool = store.connector.pool
    await store.close()
    assert held._conn is None, "given back before the pool closed, not terminated with it"
    assert pool.is_closing() and pool.get_size() == 0


async def test_a_pool_too_small_to_spare_one_keeps_none(postgres_url: str) -> None:
    """With three connections the first held one leaves two; a second would leave one, so
    it is the pool (a held connection there could starve every other statement)."""
    async with PostgresStore(postgres_url, max_size=3) as store:
        # The store holds the flusher's and the claim loop's: only the first could be kept.
        assert isinstance(store._flusher, HeldConnection)
        assert store._claimer is store.connector
        assert store.connector.held() is store.connector
    async with PostgresStore(postgres_url, max_size=2) as store:
        assert store._flusher is store.connector and store._claimer is store.connector


async def test_a_store_closed_under_a_statement_lets_it_finish_and_reopens(
    postgres_url: str,
) -> None:
    """The statement in flight when the store closes finishes and gives its connection
    back (the pool's close waits for it); reopened, the store's held connection takes a
    connection of the new pool, not the one the old pool closed."""
    store = PostgresStore(postgres_url)
    await store.open()
    held = store.connector.held()
    assert isinstance(held, HeldConnection)
    slept: list[object] = []

    async def slow() -> None:
        [row] = await store._fetch("held", SLEEP, {"seconds": 0.5}, on=held)
        slept.append(row["slept"])

    async with anyio.create_task_group() as group:
        group.start_soon(slow)
        while not held.busy:
            await anyio.lowlevel.checkpoint()
        await store.close()
    assert slept == [None], "the statement in flight finished"
    await store.open()
    try:
        assert await pid(held) > 0
    finally:
        await store.close()
