"""What a worker process says when it cannot run: one line on stderr, exit code 2.

Each test runs ``durable worker`` against a database of its own in a state the
worker must refuse: no durable tables, an older schema, or tables dropped
while it runs.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator

import asyncpg
import pytest

from durable_core.sql import migrations
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.worker.conftest import Workers, eventually

DATABASE = "durable_boot_test"


@pytest.fixture
async def empty_url(postgres_url: str) -> AsyncIterator[str]:
    """A database of this test's own with no tables in it."""
    url = await fresh_postgres_database(postgres_url, DATABASE)
    yield url
    await drop_postgres_database(url)


def refusal(workers: Workers, proc: subprocess.Popen[bytes]) -> list[str]:
    """The stderr lines of a worker that must exit 2 at once."""
    assert proc.wait(timeout=60) == 2
    return workers.log(proc).splitlines()


async def test_a_database_without_the_tables_is_one_line_and_exit_2(
    empty_url: str, workers: Workers
) -> None:
    workers.url = empty_url
    lines = refusal(workers, workers.start())
    assert lines == [
        f"durable: error: PostgreSQL {empty_url} has no durable tables: apply them with "
        "`durable migrate` or `await store.apply_schema()`"
    ]


async def test_an_older_schema_is_refused_until_durable_migrate(
    empty_url: str, workers: Workers
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(empty_url.replace("postgresql://", "postgresql+asyncpg://"))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(migrations.upgrade, 1)
    finally:
        await engine.dispose()
    workers.url = empty_url
    (line,) = refusal(workers, workers.start())
    assert line.startswith("durable: error: PostgreSQL ")
    assert "has durable schema version 1" in line and "run `durable migrate`" in line


async def test_tables_dropped_under_a_running_worker_stop_it_with_one_line(
    empty_url: str, workers: Workers
) -> None:
    async with PostgresStore(empty_url) as store:
        await store.apply_schema()
    workers.url = empty_url
    proc = workers.start()
    db = await asyncpg.connect(empty_url)
    try:

        async def listening() -> bool:
            return bool(
                await db.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
                    "AND query LIKE 'LISTEN%'",
                    empty_url.rsplit("/", 1)[1],
                )
            )

        await eventually(listening, timeout=120, what="the worker to listen")
        # The drop locks the tables one by one while a claim may hold some: either side can
        # lose a deadlock. The worker retries its claim; a drop that lost dropped nothing.
        for _ in range(20):
            try:
                await db.execute(f"DROP TABLE {WORKFLOW_TABLES}")
                break
            except asyncpg.DeadlockDetectedError:
                continue
        else:
            raise AssertionError("the drop lost a deadlock twenty times")
    finally:
        await db.close()
    assert proc.wait(timeout=60) == 2
    log = workers.log(proc)
    assert "Traceback" not in log
    assert (
        log.splitlines()[-1].startswith("durable: error: claim on PostgreSQL ")
        and "the durable tables are missing" in log.splitlines()[-1]
    )


async def test_the_worker_runs_on_the_event_loop_it_is_told(
    pg: PostgresStore, workers: Workers
) -> None:
    """uvloop by default (installed with the dev extras), asyncio's own loop when told,
    and an unknown loop is one line and exit 2."""
    on_uvloop = workers.start()
    on_asyncio = workers.start(DURABLE_EVENT_LOOP="asyncio")

    async def both_started() -> bool:
        return all("started: concurrency" in workers.log(p) for p in (on_uvloop, on_asyncio))

    await eventually(both_started, timeout=60, what="two workers started")
    assert "event loop uvloop" in workers.log(on_uvloop)
    assert "event loop asyncio" in workers.log(on_asyncio)
    assert refusal(workers, workers.start(DURABLE_EVENT_LOOP="trio")) == [
        "durable: error: DURABLE_EVENT_LOOP='trio': use one of auto, uvloop, asyncio"
    ]
