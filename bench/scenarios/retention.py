"""Retention: a prune of settled workflows beside a worker draining at full speed, the bytes a
workflow takes before and after ``VACUUM``, and the claim beside millions of settled rows.

Sizes (options, as environment variables; a smoke run uses tiny ones):

- ``DURABLE_BENCH_RETENTION_PRUNE`` (default 1,000,000): the settled workflows pruned;
- ``DURABLE_BENCH_RETENTION_BESIDE`` (default 1,000,000): the settled rows beside the claim;
- ``DURABLE_BENCH_RETENTION_DRAIN`` (default 20,000): the workflows the worker drains;
- ``DURABLE_BENCH_RETENTION_TRIALS`` (default 2): drains of each kind.

Settled history is seeded with set-based SQL: per workflow its row (ended two days ago),
three step rows and an attempt row, as a worker leaves a three-step workflow.

1. **Drain with and without a prune.** In each trial the tables get the ``PRUNE`` settled
   workflows (a drain without the prune leaves them for the next), one real worker
   (concurrency 32) starts and listens, then the backlog of ``DRAIN`` three-step
   workflows is enqueued. In the ``prune`` trials the bench prunes every settled workflow
   older than a day at the same moment, as ``durable prune`` and the fleet do
   (:func:`durable_core.runtime.retention.prune`: batches of 1,000 workflows, each a
   transaction of its own). Each trial drains without, then with the prune; the figure
   is the drain's throughput with the prune over without (server timestamps, as ``e2e``).
2. **Bytes per workflow.** The seeded tables' total size (tables, indexes, TOAST) over the
   rows; then as a steady prune leaves them: the older half pruned, before and after
   ``VACUUM`` (the space is free for reuse within the files, which keep their size), and
   what refilling as many workflows grew the tables by, per refilled workflow (0: all of
   the pruned space was reused).
3. **Claim latency.** The store's claim statement (a backlog of 1,000 pending rows, 32
   claimed, each claim in a transaction rolled back) on tables with ``BESIDE`` settled
   workflows, against the same tables with none, in the same run.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import anyio
import asyncpg

from bench import app, sql
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.procs import fleet, listeners, wait_listening
from bench.scenarios.claim import _PENDING, timed_claims
from bench.waiting_rows import settle_tables
from durable_core import DurableClient
from durable_core.durations import utcnow
from durable_core.runtime.retention import prune
from durable_core.seams.retention import PruneFilter
from durable_core.sql.retention import OWNED
from durable_postgres import PostgresStore

NAME = "retention"
TITLE = "Retention: prune beside a draining worker, bytes per workflow, claim beside history"

DRAIN_TARGET = 0.90
"""Issue 35: the drain's throughput with a prune within 10% of the same drain without."""
CLAIM_TARGET = 1.2
"""Issue 35: the claim beside settled rows within 1.2x of an empty table."""
CONCURRENCY = 32
BATCH = 1000

_OLD = """
INSERT INTO workflows (id, name, status, input, output, attempts, max_attempts, run_at,
                       created_at, updated_at, completed_at, started_at)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-0000000000aa', 'bench.retention.old',
       'succeeded', '{"args":[1],"kwargs":{}}', '2', 1, 3, t, t, t, t, t
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT now() - interval '2 days' + g * interval '1 ms') AS at(t)
"""
_OLD_STEPS = """
INSERT INTO workflow_steps (workflow_id, step_index, step_name, status, input, output,
                            attempts, started_at, completed_at)
SELECT w.id, i, 'bench.app.first', 'succeeded', '{"args":[1],"kwargs":{}}', '2', 1,
       w.created_at, w.completed_at
FROM workflows AS w, generate_series(0, 2) AS i WHERE w.name = 'bench.retention.old'
"""
_OLD_ATTEMPTS = """
INSERT INTO workflow_attempts (workflow_id, attempt, worker, started_at, ended_at, outcome)
SELECT id, 1, 'bench', created_at, completed_at, 'succeeded'
FROM workflows WHERE name = 'bench.retention.old'
"""


def _size(name: str, full: int, smoke: int, settings: Settings) -> int:
    if settings.smoke:
        return smoke
    return int(os.environ.get(name, full))


async def seed(conn: asyncpg.Connection, count: int) -> float:
    """Add ``count`` settled three-step workflows; the seconds it took."""
    started = time.perf_counter()
    await conn.execute(_OLD, count)
    await conn.execute(_OLD_STEPS)
    await conn.execute(_OLD_ATTEMPTS)
    await conn.execute("ANALYZE")
    return time.perf_counter() - started


async def total_bytes(conn: asyncpg.Connection) -> int:
    """The durable tables' size: heap, indexes and TOAST."""
    names = ["workflows", *(table.name for table in OWNED)]
    found: int = await conn.fetchval(
        "SELECT sum(pg_total_relation_size(name::regclass)) FROM unnest($1::text[]) AS name",
        names,
    )
    return int(found)


def old_ones() -> PruneFilter:
    return PruneFilter(before=utcnow() - timedelta(days=1))


async def drained(conn: asyncpg.Connection, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (
        await conn.fetchval(
            "SELECT count(*) FROM workflows WHERE name = $1 AND status = 'succeeded'",
            app.three_steps.name,
        )
        < count
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the drain of {count} workflows did not end in {timeout}s")
        await anyio.sleep(0.05)


async def drain_trial(
    settings: Settings,
    conn: asyncpg.Connection,
    store: PostgresStore,
    *,
    settled: int,
    count: int,
    pruning: bool,
) -> tuple[float, float]:
    """One drain of ``count`` beside ``settled`` settled workflows (seeded first when the
    tables lack them; pruned meanwhile with ``pruning``): workflows per second, and the
    prune's workflows per second (NaN without)."""
    await conn.execute("DELETE FROM workflows WHERE name = $1", app.three_steps.name)
    if await conn.fetchval("SELECT count(*) FROM workflows") != settled:
        await reset(conn)
        seconds = await seed(conn, settled)
        print(f"bench: retention: seeded {settled:,} workflows in {seconds:.1f}s", flush=True)
    await conn.execute("VACUUM ANALYZE")
    pruned_rate = float("nan")
    with fleet(settings.url) as group:
        before = await listeners(conn)
        proc = group.start_worker(concurrency=CONCURRENCY)
        await wait_listening(conn, [proc], before + 1)
        await DurableClient(store).start_workflows(app.three_steps, [(i,) for i in range(count)])
        async with anyio.create_task_group() as tasks:
            if pruning:

                async def run_prune() -> None:
                    nonlocal pruned_rate
                    started = time.perf_counter()
                    removed: dict[str, int] = await prune(store, old_ones(), batch=BATCH) or {}
                    if removed.get("workflows") != settled:
                        raise RuntimeError(f"pruned {removed} of {settled} settled workflows")
                    pruned_rate = settled / (time.perf_counter() - started)

                tasks.start_soon(run_prune)
            await drained(conn, count, 60 if settings.smoke else 600)
    span = await conn.fetchval(
        "SELECT extract(epoch FROM (SELECT max(completed_at) FROM workflows WHERE name = $1)"
        " - (SELECT min(s.started_at) FROM workflow_steps s"
        " JOIN workflows w ON w.id = s.workflow_id AND w.name = $1))",
        app.three_steps.name,
    )
    return count / float(span), pruned_rate


async def bytes_per_workflow(
    conn: asyncpg.Connection, count: int, store: PostgresStore
) -> dict[str, float]:
    """Bytes per workflow of ``count`` seeded ones; and as a steady prune leaves them: the
    older half pruned, before and after ``VACUUM``, and what refilling as many grew the
    tables by, per refilled workflow."""
    await reset(conn)
    await conn.execute("VACUUM FULL")
    empty = await total_bytes(conn)
    await seed(conn, count)
    seeded = await total_bytes(conn)
    half = count // 2
    middle = await conn.fetchval(
        "SELECT completed_at FROM workflows ORDER BY completed_at OFFSET $1 LIMIT 1", half
    )
    removed: dict[str, int] = await prune(store, PruneFilter(before=middle), batch=BATCH) or {}
    if removed.get("workflows") != half:
        raise RuntimeError(f"pruned {removed} of the older {half} workflows")
    pruned = await total_bytes(conn)
    await conn.execute("VACUUM")
    vacuumed = await total_bytes(conn)
    await conn.execute(_OLD.replace("'bench.retention.old'", "'bench.retention.new'"), half)
    await conn.execute(_OLD_STEPS.replace("'bench.retention.old'", "'bench.retention.new'"))
    await conn.execute(_OLD_ATTEMPTS.replace("'bench.retention.old'", "'bench.retention.new'"))
    refilled = await total_bytes(conn)
    return {
        f"{count:,} seeded": (seeded - empty) / count,
        "older half pruned, before VACUUM": (pruned - empty) / count,
        "older half pruned, after VACUUM": (vacuumed - empty) / count,
        "growth per workflow refilled after VACUUM": (refilled - vacuumed) / half,
    }


async def claim_beside(
    conn: asyncpg.Connection, beside: int, iterations: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per claim of 32 from 1,000 pending rows: with no settled rows (before
    and after), and with ``beside`` of them."""
    empty: list[float] = []
    await reset(conn)
    await conn.execute(_PENDING, 0, 1000)
    await settle_tables(conn)
    await timed_claims(conn, 32, 32, 5)  # warm the buffers
    empty += (await timed_claims(conn, 32, 32, iterations))[0]
    await seed(conn, beside)
    await settle_tables(conn)
    await timed_claims(conn, 32, 32, 5)
    with_rows = (await timed_claims(conn, 32, 32, iterations))[0]
    await conn.execute("DELETE FROM workflows WHERE name = 'bench.retention.old'")
    await settle_tables(conn)
    empty += (await timed_claims(conn, 32, 32, iterations))[0]
    return empty, with_rows


async def run(settings: Settings, result: ScenarioResult) -> None:
    settled = _size("DURABLE_BENCH_RETENTION_PRUNE", 1_000_000, 2_000, settings)
    count = _size("DURABLE_BENCH_RETENTION_DRAIN", 20_000, 300, settings)
    beside = _size("DURABLE_BENCH_RETENTION_BESIDE", 1_000_000, 2_000, settings)
    trials = _size("DURABLE_BENCH_RETENTION_TRIALS", 2, 1, settings)
    iterations = settings.pick(300, 20)
    conn = await asyncpg.connect(settings.dsn, server_settings=sql.SERVER_SETTINGS)
    store = PostgresStore(settings.url)
    await store.open()
    rates: dict[bool, list[float]] = {False: [], True: []}
    prune_rates: list[float] = []
    try:
        started = time.perf_counter()
        for _ in range(trials):
            for pruning in (False, True):
                rate, pruned = await drain_trial(
                    settings, conn, store, settled=settled, count=count, pruning=pruning
                )
                rates[pruning].append(rate)
                if pruning:
                    prune_rates.append(pruned)
        result.details["drain_seconds"] = time.perf_counter() - started
        sizes = await bytes_per_workflow(conn, settled, store)
        empty, with_rows = await claim_beside(conn, beside, iterations)
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
    drain = Figure(
        name=f"drain of {count:,} three-step workflows while {settled:,} settled ones are pruned",
        unit="workflows/s",
        value=median(rates[True]),
        floor=median(rates[False]),
        trials=rates[True],
        floor_trials=rates[False],
        target=f">= {DRAIN_TARGET:g}x without",
    )
    drain.met = (drain.ratio or 0) >= DRAIN_TARGET
    drain.note = (
        f"floor = the same drain beside the same {settled:,} settled workflows, no prune; "
        f"one worker, concurrency {CONCURRENCY}; the prune: batches of {BATCH}, "
        f"{median(prune_rates):,.0f} workflows/s during the drain; {trials} trials each"
    )
    result.add(drain)
    claim = Figure(
        name=f"claim 32 of 1,000 pending beside {beside:,} settled workflows",
        unit="ms",
        value=median(with_rows),
        floor=median(empty),
        better="lower",
        trials=[median(with_rows)],
        floor_trials=[median(empty)],
        target=f"<= {CLAIM_TARGET:g}x empty",
    )
    claim.met = (claim.ratio or 0) <= CLAIM_TARGET
    claim.note = f"floor = the same claim with no settled rows, before and after; {iterations} each"
    result.add(claim)
    for label, value in sizes.items():
        result.add(
            Figure(
                name=f"bytes per settled workflow, {label}",
                unit="bytes",
                value=value,
                better="lower",
                note="three-step workflows: their row, 3 steps, 1 attempt, with indexes",
            )
        )
    result.details.update(
        {
            "settled": settled,
            "drained": count,
            "beside": beside,
            "prune_workflows_per_s": prune_rates,
            "bytes_per_workflow": sizes,
        }
    )
