"""The store's plans: each statement planned once per connection, never as a sequential
scan where an index serves it, so a worker started beside empty, never-analysed tables
scans none of them however they grow; a URL's own settings still win."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import anyio
import asyncpg
import pytest

from durable_core import DurableClient, WorkflowConfig, workflow, workflow_step
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.records import Settlement, StepWrite
from durable_core.sql.schema import metadata, schema_versions
from durable_postgres import PostgresStore
from tests.conftest import drop_postgres_database, fresh_postgres_database

pytestmark = pytest.mark.anyio

TABLES = [table.name for table in metadata.sorted_tables if table is not schema_versions]


async def _settings(url: str) -> tuple[str, str]:
    async with PostgresStore(url) as store, store.connector.pool.acquire() as conn:
        return await conn.fetchval("SHOW plan_cache_mode"), await conn.fetchval(
            "SHOW enable_seqscan"
        )


async def test_the_store_plans_once_without_scans_and_a_url_may_say_otherwise(
    postgres_url: str,
) -> None:
    assert await _settings(postgres_url) == ("force_generic_plan", "off")
    joiner = "&" if "?" in postgres_url else "?"
    own = f"{postgres_url}{joiner}plan_cache_mode=auto&enable_seqscan=on"
    assert await _settings(own) == ("auto", "on")


@workflow_step
async def double(n: int) -> int:
    return 2 * n


@workflow
async def three(n: int) -> int:
    return await double(await double(await double(n)))


class _Draining(PostgresStore):
    """Stops its worker once ``total`` settlements have landed."""

    def __init__(self, url: str, total: int) -> None:
        super().__init__(url)
        self.left = total
        self.worker: WorkflowWorker | None = None

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        landed = await super().write_batch(steps, settlements)
        self.left -= sum(landed[1])
        if self.left <= 0 and self.worker is not None:
            self.worker.stop()
        return landed


@pytest.fixture
async def fresh_url(postgres_url: str) -> AsyncIterator[str]:
    """A database of its own (its scan counters are this test's alone), schema applied."""
    url = await fresh_postgres_database(postgres_url, "durable_plans")
    async with PostgresStore(url) as store:
        await store.apply_schema()
    yield url
    await drop_postgres_database(url)


async def _scans(conn: asyncpg.Connection) -> int:
    """Sequential scans of the durable tables, once every other session has ended."""
    while await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()"
    ):
        await conn.execute("SELECT pg_sleep(0.05)")
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    scans: int = await conn.fetchval(
        "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_user_tables "
        "WHERE relname = ANY($1::text[])",
        TABLES,
    )
    return scans


async def test_a_worker_started_beside_empty_tables_never_scans_them(fresh_url: str) -> None:
    """The worker claims once on the empty tables (its claim is planned there), then drains
    a backlog one workflow at a time: PostgreSQL's own choice scanned ``workflows`` about
    four times per workflow here (bench ``plans``)."""
    total = 200
    conn = await asyncpg.connect(fresh_url)
    try:
        store = _Draining(fresh_url, total)
        await store.open()
        try:
            worker = store.worker = WorkflowWorker(
                store, WorkflowConfig(concurrency=1, poll_interval_ms=50)
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await worker.started.wait()
                async with PostgresStore(fresh_url) as client_store:
                    while not await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' "
                        "AND datname = current_database()"
                    ):
                        await conn.execute("SELECT pg_sleep(0.02)")  # until it claimed, idle
                    before = await conn.fetchval(
                        "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_user_tables"
                        " WHERE relname = ANY($1::text[])",
                        TABLES,
                    )
                    await DurableClient(client_store).start_workflows(
                        three, [(i,) for i in range(total)]
                    )
        finally:
            await store.close()
        after = await _scans(conn)
        succeeded = await conn.fetchval("SELECT count(*) FROM workflows WHERE status = 'succeeded'")
    finally:
        await conn.close()
    assert succeeded == total
    assert after - before <= 2, f"{after - before} sequential scans for {total} workflows"
