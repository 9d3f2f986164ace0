"""The URL options of connections: the server's timeouts, the client's own, the pool's size."""

from __future__ import annotations

import asyncpg
import pytest

from durable_core import DurableClient, WorkflowStatus, recv, workflow
from durable_core.errors import InvalidDatabaseURLError, StoreUnavailableError
from durable_postgres import PostgresStore
from tests.conftest import migrated_postgres_database


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", ""])
def test_a_command_timeout_that_is_no_number_of_seconds_is_refused(value: str) -> None:
    url = f"postgresql://u@127.0.0.1/db?durable_command_timeout={value}"
    with pytest.raises(InvalidDatabaseURLError, match=r"durable_command_timeout=.*seconds above 0"):
        PostgresStore(url)


async def test_server_timeouts_in_the_url_and_the_client_timeout_apply(postgres_url: str) -> None:
    url = f"{postgres_url}?statement_timeout=150ms&lock_timeout=2s&durable_command_timeout=0.3"
    async with PostgresStore(url) as store:
        pool = store.connector.pool
        assert await pool.fetchval("SHOW statement_timeout") == "150ms"
        assert await pool.fetchval("SHOW lock_timeout") == "2s"
        assert await pool.fetchval("SHOW enable_seqscan") == "off"
        with pytest.raises(asyncpg.QueryCanceledError, match="statement timeout"):
            await pool.fetchval("SELECT pg_sleep(1)")
    async with PostgresStore(f"{postgres_url}?durable_command_timeout=0.3") as store:
        with pytest.raises(TimeoutError):
            await store.connector.pool.fetchval("SELECT pg_sleep(5)")


@workflow
async def waits_for_a_message() -> object:
    return await recv("go")


async def test_a_statement_the_server_cancels_is_a_transient_error(postgres_url: str) -> None:
    """``lock_timeout`` cancels a write that waits on a locked row: the store says the
    database is unavailable (which the worker retries), and the same write works once the
    lock is gone."""
    database = await migrated_postgres_database(postgres_url, "lock_timeout")
    async with PostgresStore(f"{database}?lock_timeout=100ms") as store:
        client = DurableClient(store)
        handle = await client.start_workflow(waits_for_a_message)
        locker = await asyncpg.connect(database)
        try:
            async with locker.transaction():
                await locker.execute("SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE", handle.id)
                with pytest.raises(StoreUnavailableError, match="lock timeout"):
                    await client.cancel(handle.id)
        finally:
            await locker.close()
        await client.cancel(handle.id)
        assert await handle.status() is WorkflowStatus.CANCELLED


def test_the_pool_size_comes_from_the_argument_else_the_url_else_ten() -> None:
    url = "postgresql://u@127.0.0.1/db"
    assert PostgresStore(url).connector.max_size == 10
    assert PostgresStore(f"{url}?durable_pool_size=3").connector.max_size == 3
    assert PostgresStore(f"{url}?durable_pool_size=3", max_size=7).connector.max_size == 7
    for value in ("0", "-2", "2.5", "many", ""):
        with pytest.raises(InvalidDatabaseURLError, match=r"durable_pool_size=.*at least 1"):
            PostgresStore(f"{url}?durable_pool_size={value}")
