"""The store contract suite against the built-in SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

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
from durable_sqlite import SQLiteStore
from tests.conftest import migrated_sqlite_url


@pytest.fixture
async def durable_store(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(await migrated_sqlite_url(tmp_path / "contract.db", tmp_path_factory))
    await store.open()
    await store.apply_schema()
    yield store
    await store.close()


@pytest.fixture
async def durable_second_store(
    tmp_path: Path, durable_store: SQLiteStore
) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'contract.db'}")
    await store.open()
    yield store
    await store.close()


class TestSQLiteStore(
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
