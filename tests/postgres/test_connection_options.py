"""The URL options that bound statements: the server's timeouts and the client's own."""

from __future__ import annotations

import asyncpg
import pytest

from durable_core.errors import InvalidDatabaseURLError
from durable_postgres import PostgresStore


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
