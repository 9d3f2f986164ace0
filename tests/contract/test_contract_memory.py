"""The store contract suite against ``MemoryStore``: every class the SQLite store passes
but :class:`~durable_core.contract.TransactionContract` (a transaction step needs a SQL
connection, which a memory store has none of: it refuses with ``TransactionStepError``,
``tests/test_memory_store.py``)."""

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
    Tamper,
    UpdatesContract,
)
from durable_core.testing import MemoryStore


@pytest.fixture
async def durable_store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    await store.open()
    await store.apply_schema()
    yield store
    await store.close()


@pytest.fixture
async def durable_second_store(durable_store: MemoryStore) -> AsyncIterator[MemoryStore]:
    store = MemoryStore(tables=durable_store.tables)
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def durable_tamper(durable_store: MemoryStore) -> Tamper:
    return durable_store.tamper


class TestMemoryStore(
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
):
    pass


def test_a_memory_prune_knows_every_table_a_workflow_owns_in_the_sql_schema() -> None:
    from durable_core.memory.retention import OWNED as MEMORY_OWNED
    from durable_core.sql.retention import OWNED as SQL_OWNED

    assert set(MEMORY_OWNED) == {table.name for table in SQL_OWNED}
