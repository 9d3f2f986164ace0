"""The shared store and claimer contract suites against ``PostgresStore``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from durable_core.contract import (
    AttributesContract,
    ClaimerContract,
    CompensationContract,
    DebounceContract,
    ErasureContract,
    LivenessContract,
    RetentionContract,
    ScheduleOverlapContract,
    StoreContract,
    StreamsContract,
    Tamper,
    TransactionContract,
    UpdatesContract,
)
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore


def plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.fixture
async def durable_store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(postgres_url)
    await store.open()
    await store.apply_schema()
    conn = await asyncpg.connect(plain(postgres_url))
    try:
        await conn.execute(f"TRUNCATE {WORKFLOW_TABLES}")
    finally:
        await conn.close()
    yield store
    await store.close()


@pytest.fixture
async def durable_second_store(
    postgres_url: str, durable_store: PostgresStore
) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(postgres_url) as store:
        yield store


@pytest.fixture
def durable_tamper(postgres_url: str) -> Tamper:
    async def tamper(
        table: str,
        column: str,
        value: str | None,
        *,
        workflow_id: str,
        step_index: int | None = None,
    ) -> None:
        if table == "workflows":
            sql = f'UPDATE workflows SET "{column}" = $1 WHERE id = $2'
            args: list[object] = [value, workflow_id]
        elif table == "workflow_steps" and step_index is not None:
            sql = (
                f'UPDATE workflow_steps SET "{column}" = $1 '
                "WHERE workflow_id = $2 AND step_index = $3"
            )
            args = [value, workflow_id, step_index]
        else:
            raise ValueError(f"cannot tamper with {table!r} (step_index={step_index})")
        conn = await asyncpg.connect(plain(postgres_url))
        try:
            status = await conn.execute(sql, *args)
        finally:
            await conn.close()
        assert status == "UPDATE 1", f"tampering matched {status!r} in {table}, not one row"

    return tamper


class TestPostgresStore(
    StoreContract,
    ClaimerContract,
    StreamsContract,
    UpdatesContract,
    ScheduleOverlapContract,
    CompensationContract,
    DebounceContract,
    ErasureContract,
    RetentionContract,
    AttributesContract,
    LivenessContract,
    TransactionContract,
):
    pass
