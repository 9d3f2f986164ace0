"""Claim cost as the backlog grows, over a table already full of settled history.

Rows are generated in SQL (``generate_series``): first the history (succeeded
workflows with three succeeded steps each), then pending rows in stages so
the backlog reaches each size in turn. At each size the store's claim
statement runs many times, each inside a transaction that is rolled back, so
the backlog stays exactly that size; the figure is the median time of the
claim statement alone. The floor column is the same claim at the smallest
backlog, measured in the same run: the ratio is the growth the target bounds.
A bare ``SELECT 1`` round trip is measured beside every size for scale.
"""

from __future__ import annotations

import time

import asyncpg

from bench import sql
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.floor import claim_args
from durable_core.definitions.queues import DEFAULT_QUEUE, Queue

NAME = "claim"
TITLE = "Claim cost as the backlog grows (ms per claim statement)"

TARGET_GROWTH = 2.0

_HISTORY = """
INSERT INTO workflows (id, name, status, input, output, attempts, max_attempts, run_at,
                       created_at, updated_at, completed_at)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000001', 'bench.app.three_steps',
       'succeeded', '{"args":[1],"kwargs":{}}', '2', 1, 3, t, t, t, t
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT now() - interval '2 days' + g * interval '10 ms') AS at(t)
"""

_HISTORY_STEPS = """
INSERT INTO workflow_steps (workflow_id, step_index, step_name, status, input, output,
                            attempts, started_at, completed_at)
SELECT w.id, i, 'bench.app.first', 'succeeded', '{"args":[1],"kwargs":{}}', '2', 1,
       w.created_at, w.completed_at
FROM workflows AS w, generate_series(0, 2) AS i
"""

_PENDING = """
INSERT INTO workflows (id, name, status, input, attempts, max_attempts, run_at,
                       created_at, updated_at)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000002', 'bench.app.three_steps',
       'pending', '{"args":[1],"kwargs":{}}', 0, 3, t, t, t
FROM generate_series($1::int + 1, $2::int) AS g,
     LATERAL (SELECT now() - interval '1 day' + g * interval '10 ms') AS at(t)
"""


LIMITED = Queue(DEFAULT_QUEUE, concurrency=1_000_000)
"""The default queue with a fleet concurrency limit that never binds: what the claim
costs when it must take the queue's lock and count what runs."""

_UNSERVED = """
INSERT INTO workflows (id, name, status, input, attempts, max_attempts, run_at,
                       created_at, updated_at)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000003', 'other.app.report',
       'pending', '{"args":[1],"kwargs":{}}', 0, 3, t, t, t
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT now() - interval '3 days' + g * interval '10 ms') AS at(t)
"""


KEYED = Queue(DEFAULT_QUEUE, key_concurrency=4)
"""The default queue with a per-key limit: its claim walks each key's rows (fairly)."""

COLD_KEYS = 100

_KEYED = f"""
UPDATE workflows SET concurrency_key = CASE
    WHEN id IN (SELECT id FROM workflows WHERE status = 'pending'
                AND name = 'bench.app.three_steps' ORDER BY run_at DESC LIMIT {COLD_KEYS})
    THEN 'cold-' || id ELSE 'hot' END
WHERE status = 'pending' AND name = 'bench.app.three_steps'
"""


async def timed_claims(
    conn: asyncpg.Connection,
    limit: int,
    expected: int,
    iterations: int,
    queue: Queue | None = None,
) -> tuple[list[float], asyncpg.prepared_stmt.PreparedStatement]:
    """Milliseconds per claim (with ``queue``'s limits: its lock statement and the claim),
    each run in a transaction rolled back and checked to return ``expected`` rows; and
    the prepared statement (the server forgets it once the object is gone)."""
    claim = await conn.prepare(sql.claim_for(queue).sql)
    lock = await conn.prepare(sql.SERIALIZED.sql)
    lock_args = sql.positional(sql.SERIALIZED, locked_queues=[DEFAULT_QUEUE])
    times = []
    for _ in range(iterations):
        transaction = conn.transaction()
        await transaction.start()
        try:
            started = time.perf_counter()
            if queue is not None and queue.fleet_limited:
                await lock.fetch(*lock_args)
            rows = await claim.fetch(*claim_args("bench:claim", limit, queue))
            times.append((time.perf_counter() - started) * 1000)
        finally:
            await transaction.rollback()
        if len(rows) != expected:
            raise RuntimeError(f"claim returned {len(rows)} rows, expected {expected}")
    return times, claim


async def _claims(conn: asyncpg.Connection, limit: int, iterations: int) -> list[float]:
    """Milliseconds per claim statement of ``limit`` rows from a backlog."""
    return (await timed_claims(conn, limit, limit, iterations))[0]


async def _round_trips(conn: asyncpg.Connection, iterations: int) -> list[float]:
    select = await conn.prepare("SELECT 1")
    times = []
    for _ in range(iterations):
        started = time.perf_counter()
        await select.fetchval()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def run(settings: Settings, result: ScenarioResult) -> None:
    history = settings.pick(1_000_000, 2_000)
    sizes = [1_000, 100_000, 1_000_000] if not settings.smoke else [100, 1_000]
    iterations = settings.pick(300, 20)
    limits = (1, 32)
    conn = await asyncpg.connect(settings.dsn, server_settings=sql.SERVER_SETTINGS)
    try:
        await reset(conn)
        started = time.perf_counter()
        await conn.execute(_HISTORY, history)
        await conn.execute(_HISTORY_STEPS)
        result.details["history_rows"] = history
        result.details["history_steps"] = 3 * history
        loaded = 0
        per_size: dict[int, dict[str, float]] = {}
        for size in sizes:
            await conn.execute(_PENDING, loaded, size)
            loaded = size
            await conn.execute("ANALYZE workflows")
            await conn.execute("ANALYZE workflow_steps")
            await _claims(conn, limits[0], 5)  # warm the plan and the buffers
            figures: dict[str, float] = {}
            for limit in limits:
                figures[f"limit {limit}"] = median(await _claims(conn, limit, iterations))
            figures["select 1"] = median(await _round_trips(conn, iterations))
            per_size[size] = figures
        largest = per_size[sizes[-1]]["limit 32"]
        # The same claim with a fleet limit on the queue: its lock and its count of what runs.
        limited = median((await timed_claims(conn, 32, 32, iterations, LIMITED))[0])
        result.add(
            Figure(
                name=f"claim 32 rows from a queue with a fleet limit, {sizes[-1]:,} pending",
                unit="ms",
                value=limited,
                floor=largest,
                better="lower",
                note="floor = the same claim from the queue without limits",
            )
        )
        # As many rows again of a workflow this worker does not serve: routing skips them.
        await conn.execute(_UNSERVED, sizes[-1])
        await conn.execute("ANALYZE workflows")
        unserved = median(await _claims(conn, 32, iterations))
        result.add(
            Figure(
                name=f"claim 32 rows, {sizes[-1]:,} pending + {sizes[-1]:,} nobody serves",
                unit="ms",
                value=unserved,
                floor=largest,
                better="lower",
                note="the unserved rows are older (first in run_at order); floor = without them",
                target=f"<= {TARGET_GROWTH:g}x the floor",
                met=unserved <= TARGET_GROWTH * largest,
            )
        )
        plan = await _explain(conn, limits[1])
        result.details["plan_at_largest"] = plan
        # Per-key limits: every pending row one hot key's but the newest 100, a key each.
        await conn.execute(_KEYED)
        await conn.execute("ANALYZE workflows")
        keyed = median((await timed_claims(conn, 32, 32, iterations, KEYED))[0])
        result.add(
            Figure(
                name=(
                    f"claim 32 rows from a keyed queue (key_concurrency 4): one hot key "
                    f"of {sizes[-1] - COLD_KEYS:,} pending, {COLD_KEYS} cold keys"
                ),
                unit="ms",
                value=keyed,
                floor=limited,
                better="lower",
                note="one row per key before any key's second; floor = the fleet-limited claim",
            )
        )
        result.details["load_and_measure_seconds"] = time.perf_counter() - started
        smallest = sizes[0]
        for limit in limits:
            key = f"limit {limit}"
            for size in sizes:
                figure = Figure(
                    name=f"claim {limit} row(s), {size:,} pending",
                    unit="ms",
                    value=per_size[size][key],
                    floor=per_size[smallest][key],
                    better="lower",
                    note=(
                        f"floor = same claim at {smallest:,} pending; SELECT 1 round trip "
                        f"{per_size[size]['select 1']:.3f} ms; {history:,} settled rows beside"
                    ),
                )
                if size == sizes[-1]:
                    figure.target = f"<= {TARGET_GROWTH:g}x the {smallest:,} figure"
                    figure.met = (figure.ratio or 0) <= TARGET_GROWTH
                result.add(figure)
        result.details["per_size_ms"] = {str(k): v for k, v in per_size.items()}
    finally:
        await reset(conn)
        await conn.close()


async def _explain(conn: asyncpg.Connection, limit: int) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of one claim, rolled back."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        rows = await conn.fetch(
            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + sql.CLAIM.sql,
            *claim_args("bench:explain", limit),
        )
    finally:
        await transaction.rollback()
    return "\n".join(row[0] for row in rows)
