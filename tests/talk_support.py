"""A store on each backend for the streams and updates tests (fresh tables each test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_core import open_store
from durable_core.seams.store import Store
from durable_core.testing import MemoryStore
from tests.conftest import (
    POSTGRES_URL,
    empty_mysql_database,
    migrated_postgres_database,
    migrated_sqlite_url,
)


@pytest.fixture(params=["sqlite", "postgresql", "mysql", "memory"])
async def talk_store(
    request: pytest.FixtureRequest, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Store]:
    """An open store with the schema applied on a fresh database of each backend."""
    module = request.module.__name__.rsplit(".", 1)[-1]
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    if request.param == "sqlite":
        url = await migrated_sqlite_url(tmp_path / "durable.db", tmp_path_factory)
    elif request.param == "postgresql":
        url = await migrated_postgres_database(POSTGRES_URL, f"{base}_{module}")
    elif request.param == "mysql":
        url = await empty_mysql_database(f"{base}_{module}")
    store = MemoryStore() if request.param == "memory" else await open_store(url)
    await store.apply_schema()
    try:
        yield store
    finally:
        await store.close()
