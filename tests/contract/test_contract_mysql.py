"""The store contract suite against MariaDB (or MySQL 8) through ``MySQLStore``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from durable_core.contract import (
    AttributesContract,
    CompensationContract,
    DebounceContract,
    ErasureContract,
    NoClaimerContract,
    RetentionContract,
    ScheduleOverlapContract,
    StoreContract,
    StreamsContract,
    TransactionContract,
    UpdatesContract,
)
from durable_core.sql import schema
from durable_mysql import MySQLStore


async def _open(url: str) -> MySQLStore:
    store = MySQLStore(url)
    await store.open()
    return store


@pytest.fixture
async def durable_store(mysql_url: str) -> AsyncIterator[MySQLStore]:
    store = await _open(mysql_url)
    async with store.engine.begin() as conn:
        await conn.execute(schema.workflow_steps.delete())
        await conn.execute(schema.workflows.delete())
        await conn.execute(schema.workflow_schedules.delete())
    yield store
    await store.close()


@pytest.fixture
async def durable_second_store(
    mysql_url: str, durable_store: MySQLStore
) -> AsyncIterator[MySQLStore]:
    store = await _open(mysql_url)
    yield store
    await store.close()


class TestMySQLStore(
    StoreContract,
    NoClaimerContract,
    StreamsContract,
    UpdatesContract,
    ScheduleOverlapContract,
    AttributesContract,
    CompensationContract,
    DebounceContract,
    ErasureContract,
    RetentionContract,
    TransactionContract,
):
    pass
