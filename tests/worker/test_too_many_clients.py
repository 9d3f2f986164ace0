"""A worker started while the server refuses new connections waits with one log line.

For real: PostgreSQL refusing a role past its ``CONNECTION LIMIT`` (``too many
connections``), and PgBouncer past its ``max_client_conn``, with every allowed
connection held by the test. The worker retries with backoff (DEBUG lines), logs one
WARNING, never exits or prints a traceback, and runs a workflow once the test lets go.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import asyncpg
import pytest

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.conftest import migrated_postgres_database, scratch_name
from tests.pgbouncer import pgbouncer
from tests.worker import pooler_app
from tests.worker.conftest import Workers, eventually

LIMIT = 16
"""Connections the server (or pooler) allows: the test holds them all, then none (a worker
of concurrency 2 needs fewer)."""
WAIT = 120.0


@asynccontextmanager
async def limited_role(database: str) -> AsyncIterator[str]:
    """``database``'s URL as a role of its own allowed :data:`LIMIT` connections (dropped at
    the end)."""
    role = scratch_name("durable_limited")
    admin = await asyncpg.connect(database)
    try:
        await admin.execute(pooler_app.ROWS_DDL)
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT {LIMIT}')
        name = database.rsplit("/", 1)[1]
        await admin.execute(f'GRANT ALL ON DATABASE "{name}" TO "{role}"')
        await admin.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
        await admin.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"')
        await admin.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        yield database.replace("://postgres@", f"://{role}@", 1)
    finally:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
        )
        await admin.execute(f'DROP OWNED BY "{role}"')
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


@contextmanager
def nothing(url: str) -> Iterator[str]:
    yield url


@pytest.mark.parametrize("refuser", ["postgresql", "pgbouncer"])
async def test_a_worker_waits_out_too_many_clients_with_one_log_line(
    postgres_url: str, tmp_path: Path, refuser: str
) -> None:
    database = await migrated_postgres_database(postgres_url, f"too_many_{refuser}")
    name = database.rsplit("/", 1)[1]
    async with limited_role(database) as limited:
        with (
            pgbouncer(postgres_url, "transaction", max_client_conn=LIMIT)
            if refuser == "pgbouncer"
            else nothing(limited) as through
        ):
            url = limited if isinstance(through, str) else through.url(name)
            if refuser == "pgbouncer":
                url = f"{url}?durable_pooler=transaction"
            await _refused_then_served(url, tmp_path, refuser)


async def _refused_then_served(url: str, tmp_path: Path, refuser: str) -> None:
    plain = url.split("?", 1)[0]
    held = [await asyncpg.connect(plain, statement_cache_size=0) for _ in range(LIMIT)]
    with pytest.raises((asyncpg.TooManyConnectionsError, asyncpg.ProtocolViolationError)):
        await asyncpg.connect(plain, statement_cache_size=0)
    workers = Workers(url, tmp_path)
    try:
        proc = workers.start(
            app="tests.worker.pooler_app", WORKFLOW_CONCURRENCY=2, DURABLE_LOG_LEVEL="DEBUG"
        )

        async def retried() -> bool:
            return "still unreachable" in workers.log(proc)

        await eventually(retried, timeout=WAIT, what="the worker to try again, quietly")
        assert proc.poll() is None, workers.log(proc)
        for conn in held:
            await conn.close()
        held.clear()

        async def started() -> bool:
            return "started: concurrency" in workers.log(proc)

        await eventually(started, timeout=WAIT, what="the worker to start")
        async with PostgresStore(url) as store:
            handle = await DurableClient(store).start_workflow(pooler_app.steps, 1)
            assert await handle.wait_with_timeout(WAIT) is WorkflowStatus.SUCCEEDED

        async def back() -> bool:  # once it has answered for a second with no failure
            return "reachable again" in workers.log(proc)

        await eventually(back, timeout=WAIT, what="the worker to say the database is back")
        log = workers.log(proc)
        warnings = [line for line in log.splitlines() if " WARNING " in line]
        assert len(warnings) == 1, log
        refusal = "too many connections" if refuser == "postgresql" else "max_client_conn"
        assert refusal in warnings[0] and "retrying with backoff" in warnings[0]
        assert "Traceback" not in log and " ERROR " not in log, log
        assert proc.poll() is None
    finally:
        workers.stop_all()
        for conn in held:
            await conn.close()


async def test_a_running_worker_waits_out_refused_connections_with_one_warning(
    postgres_url: str, tmp_path: Path
) -> None:
    """Its sessions cut while the role may open none (``CONNECTION LIMIT 0``): every part
    of the worker retries quietly under one WARNING, and the work waiting meanwhile runs
    once connections are allowed again."""
    database = await migrated_postgres_database(postgres_url, "too_many_running")
    async with limited_role(database) as limited, PostgresStore(database) as store:
        role = limited.split("://", 1)[1].split("@", 1)[0]
        client = DurableClient(store)
        workers = Workers(limited, tmp_path)
        admin = await asyncpg.connect(database)
        try:
            proc = workers.start(
                app="tests.worker.pooler_app", WORKFLOW_CONCURRENCY=2, DURABLE_LOG_LEVEL="DEBUG"
            )
            before = await client.start_workflow(pooler_app.steps, 1)
            assert await before.wait_with_timeout(WAIT) is WorkflowStatus.SUCCEEDED

            await admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT 0')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
            )
            during = await client.start_workflow(pooler_app.steps, 2)

            async def retried() -> bool:
                return "still unreachable" in workers.log(proc)

            await eventually(retried, timeout=WAIT, what="the worker to retry, quietly")
            assert proc.poll() is None, workers.log(proc)
            await admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT {LIMIT}')
            assert await during.wait_with_timeout(WAIT) is WorkflowStatus.SUCCEEDED

            async def back() -> bool:
                return "reachable again" in workers.log(proc)

            await eventually(back, timeout=WAIT, what="the worker to say the database is back")
            log = workers.log(proc)
            outage = [line for line in log.splitlines() if "is unreachable" in line]
            assert len(outage) == 1 and " WARNING " in outage[0], log
            assert "too many connections" in outage[0] or "terminat" in outage[0], outage
            assert "Traceback" not in log and " ERROR " not in log, log
            assert proc.poll() is None
        finally:
            workers.stop_all()
            await admin.close()
