"""A transaction step's cost (issue 36), beside a plain step and bare asyncpg, in one run.

Each figure is one INSERT of one row into ``bench_tx_rows``, timed per step call by the
workflow body (:func:`bench.app.many_inserts`, through the real ``Executor`` as the
``persisted step`` figure is): as a transaction step on the store's own database (the
record is the step's row, in the insert's transaction), as a transaction step on another
database (the record is a row of ``durable_step_outputs`` there, the store's row written
after), as a plain step doing the same insert in a transaction of its own (at least
once: what a user writes without transaction steps), and by bare asyncpg (``BEGIN;
INSERT; COMMIT`` on a pooled connection). The rounds interleave, each in both orders.
The CPU this process spends per call is measured over each round (the Executor's per
workflow costs, its claim and settle, are spread over the round's calls).
"""

from __future__ import annotations

import time

import asyncpg
from sqlalchemy.ext.asyncio import create_async_engine

from bench import app
from bench.common import Settings
from bench.floor import LEASE_SECONDS
from durable_core import AppDatabase, DurableClient, Executor, WorkflowConfig, transaction_step
from durable_core.sql.app_database import close_app_databases
from durable_postgres import PostgresStore

KINDS = ("here", "elsewhere", "plain", "bare")
TABLE_DDL = (
    f"CREATE TABLE IF NOT EXISTS {app.BENCH_ROWS} (workflow_id text NOT NULL, n int NOT NULL)"
)
INSERT = f"INSERT INTO {app.BENCH_ROWS} (workflow_id, n) VALUES ($1, $2)"


def app_dsn(dsn: str) -> str:
    """The other database the ``elsewhere`` figure writes to: the bench's, suffixed."""
    base, _, query = dsn.partition("?")
    return f"{base}_app" + (f"?{query}" if query else "")


async def _ensure_database(dsn: str) -> None:
    base, name = dsn.split("?", 1)[0].rsplit("/", 1)
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def _through_the_executor(store: PostgresStore, count: int, how: str) -> list[float]:
    handle = await DurableClient(store).start_workflow(app.many_inserts, count, how)
    claimed = await store.acquire(handle.id, worker_id="bench", lease_seconds=LEASE_SECONDS)
    assert claimed is not None
    app.step_times.clear()
    await Executor(store, WorkflowConfig()).run(claimed)
    return [t * 1e6 for t in app.step_times]


async def _bare(pool: asyncpg.Pool, count: int) -> list[float]:
    times = []
    clock = time.perf_counter
    for n in range(count):
        started = clock()
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(INSERT, "bare", n)
        times.append((clock() - started) * 1e6)
    return times


async def measure(
    settings: Settings, count: int, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Microseconds per step call of each kind, ``rounds`` interleaved rounds of ``count``,
    and this process's CPU microseconds per call of each kind (one figure a round)."""
    other = app_dsn(settings.dsn)
    await _ensure_database(other)
    for dsn in (settings.dsn, other):
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(TABLE_DDL)
            await conn.execute(f"TRUNCATE {app.BENCH_ROWS}")
        finally:
            await conn.close()
    database = AppDatabase(other)
    app.ELSEWHERE["step"] = transaction_step(database=database, name="bench.app.insert_row")(
        app.insert_row
    )
    engine = create_async_engine(settings.dsn.replace("postgresql://", "postgresql+asyncpg://"))
    app.PLAIN_ENGINE["engine"] = engine
    pool = await asyncpg.create_pool(settings.dsn, min_size=1, max_size=2)
    store = PostgresStore(settings.url)
    await store.open()
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    try:
        for _ in range(2):  # connections, plans and the record table made before timing
            for how in ("here", "elsewhere", "plain"):
                await _through_the_executor(store, 3, how)
            await _bare(pool, 3)
        for number in range(rounds):
            order = KINDS if number % 2 == 0 else tuple(reversed(KINDS))
            for kind in order:
                began = time.process_time()
                if kind == "bare":
                    times[kind] += await _bare(pool, count)
                else:
                    times[kind] += await _through_the_executor(store, count, kind)
                cpu[kind].append((time.process_time() - began) / count * 1e6)
    finally:
        await close_app_databases()
        await store.close()
        await pool.close()
        await engine.dispose()
    return times, cpu
