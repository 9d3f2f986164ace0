"""Latency of PostgresStore's hot-path statements, and claim cost at 1k vs 1M pending rows.

Not collected by pytest. It empties the durable tables of the database it is given::

    .venv/bin/python tests/postgres/bench_postgres_store.py \
        postgresql://postgres@127.0.0.1:5432/durable_pg_helper
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import anyio
import asyncpg

from durable_core.definitions.queues import Queue, Route
from durable_core.seams.records import NewWorkflow, Settlement, WorkflowStatus
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from durable_postgres.connector import compile_statement
from durable_postgres.dialect import PostgresStatements

ROUTES = [Route(Queue("default"), ("bench",), 1000)]
"""Every row these tests claim."""

CLAIM = compile_statement(PostgresStatements().claim)


def rows(count: int) -> list[NewWorkflow]:
    return [
        NewWorkflow(id=str(uuid.uuid4()), name="bench", input="[1]", max_attempts=3)
        for _ in range(count)
    ]


async def timed(runs: int, call: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def report(what: str, result: tuple[float, float]) -> None:
    print(f"{what:44} median {result[0]:7.3f} ms   p95 {result[1]:7.3f} ms")


async def fill(db: asyncpg.Connection, pending: int) -> None:
    await db.execute(f"TRUNCATE {WORKFLOW_TABLES}")
    await db.execute(
        "INSERT INTO workflows (id, name, status, input, max_attempts, run_at, created_at, "
        "updated_at) SELECT gen_random_uuid()::text, 'bench', 'pending', '[1]', 3, "
        "now() - g * interval '1 ms', now(), now() FROM generate_series(1, $1) g",
        pending,
    )
    await db.execute("VACUUM ANALYZE workflows")


async def main(url: str) -> None:
    db = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    async with PostgresStore(url) as store:
        await store.apply_schema()
        await db.execute(f"TRUNCATE {WORKFLOW_TABLES}")
        await timed(50, lambda: store.enqueue(rows(1)))  # warm the statement caches
        report("enqueue, 1 row", await timed(500, lambda: store.enqueue(rows(1))))
        batches = [rows(1000) for _ in range(20)]
        report("enqueue, 1000-row batch", await timed(20, lambda: store.enqueue(batches.pop())))

        await fill(db, 100_000)
        claim = lambda: store.claim(worker_id="bench", limit=8, lease_seconds=60, routes=ROUTES)  # noqa: E731
        await timed(20, claim)
        report("claim 8 (100k pending)", await timed(200, claim))

        (held,) = await store.claim(worker_id="bench", limit=1, lease_seconds=60, routes=ROUTES)
        index = iter(range(1_000_000))

        async def step() -> None:
            i = next(index)
            await store.start_step(held.lease, i, "bench.step", json.dumps([i]))
            await store.complete_step(held.lease, i, json.dumps(i))

        await timed(20, step)
        report("step write (start_step + complete_step)", await timed(300, step))
        last = iter(range(1_000_000, 2_000_000))
        report(
            "start_step alone",
            await timed(300, lambda: store.start_step(held.lease, next(last), "s", "[]")),
        )
        report("heartbeat", await timed(300, lambda: store.heartbeat(held.lease, 60)))

        settle_targets = await store.claim(
            worker_id="bench", limit=300, lease_seconds=60, routes=ROUTES
        )
        report(
            "settle succeeded",
            await timed(
                300,
                lambda: store.settle(
                    Settlement(settle_targets.pop().lease, WorkflowStatus.SUCCEEDED, output="1")
                ),
            ),
        )

        for pending in (1_000, 1_000_000):
            await fill(db, pending)
            await timed(20, claim)
            report(f"claim 8 ({pending:,} pending)", await timed(100, claim))

        transaction = db.transaction()
        await transaction.start()
        try:
            lines = await db.fetch(
                f"EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) {CLAIM.sql}",
                *CLAIM.args({"worker": "bench", "limit": 8, "lease_seconds": 60.0}),
            )
        finally:
            await transaction.rollback()
        print("\nEXPLAIN ANALYZE of the claim at 1M pending:")
        print("\n".join(line[0] for line in lines))
    await db.close()


if __name__ == "__main__":
    anyio.run(
        main,
        sys.argv[1]
        if len(sys.argv) > 1
        else "postgresql://postgres@127.0.0.1:5432/durable_pg_helper",
    )
