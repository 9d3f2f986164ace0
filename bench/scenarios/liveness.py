"""What tying a worker's liveness to its database session costs, beside the claim.

The claim statement is unchanged by it (its SQL is the same before and after). What a
worker adds is one check per poll interval for workers whose liveness session ended
(:mod:`durable_core.sql.workers`: one read of ``pg_locks`` and of the workers' rows
that name a session), and, when it finds one, one transaction ending that worker's
leases. Measured at a fleet's scale: ``workers`` workers, each holding its liveness
lock on a session of its own and named by its registry row, ``running`` workflows
running under their leases, ``pending`` pending; the floor is the claim of 32 rows
from the same tables, measured in the same run. Then the whole of it, end to end: a
worker process draining three-step workflows at concurrency 32, with its liveness
session and its checks, beside the same worker with them off (``durable_liveness=off``),
in alternating trials.
"""

from __future__ import annotations

import time

import asyncpg

from bench import sql
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.scenarios.claim import _PENDING, timed_claims
from bench.scenarios.e2e import drain
from durable_core import DurableClient
from durable_core.sql.workers import WorkerStatements
from durable_postgres import PostgresStore
from durable_postgres.connector import compile_statement
from durable_postgres.dialect import LIVENESS_LOCKS, PostgresDialect

NAME = "liveness"
TITLE = "Liveness sessions: the check for dead workers beside the claim (ms per statement)"

_WORKERS = """
INSERT INTO workflow_workers (worker_id, host, pid, concurrency, queues, names, in_flight,
                              started_at, heartbeat_at, expires_at, session_key, session_epoch)
SELECT 'bench:worker-' || k, 'bench', k, 100, '["default"]', '[]', 100,
       now(), now(), now() + interval '1 hour', k, pg_postmaster_start_time()
FROM generate_series(1, $1::int) AS k
"""

_RUNNING = """
INSERT INTO workflows (id, name, status, input, attempts, max_attempts, run_at, created_at,
                       updated_at, started_at, locked_by, lock_token, locked_until)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000004', 'bench.app.three_steps',
       'running', '{"args":[1],"kwargs":{}}', 1, 3, now(), now(), now(), now(),
       'bench:worker-' || (1 + g % $2::int), gen_random_uuid()::text, now() + interval '1 hour'
FROM generate_series(1, $1::int) AS g
"""

_dead = WorkerStatements(PostgresDialect()).dead
assert _dead is not None, "PostgreSQL tells when a session ended"
DEAD = compile_statement(_dead)
_TAKE = "SELECT pg_advisory_lock($1::int, $2::int)"
_GIVE = "SELECT pg_advisory_unlock($1::int, $2::int)"


async def run(settings: Settings, result: ScenarioResult) -> None:
    workers = settings.pick(64, 4)
    running = settings.pick(6_400, 40)
    pending = settings.pick(100_000, 1_000)
    iterations = settings.pick(300, 20)
    conn = await asyncpg.connect(settings.dsn, server_settings=sql.SERVER_SETTINGS)
    sessions: list[asyncpg.Connection] = []
    try:
        await reset(conn)
        await conn.execute(_PENDING, 0, pending)
        await conn.execute(_RUNNING, running, workers)
        await conn.execute(_WORKERS, workers)
        await conn.execute("ANALYZE workflows")
        await conn.execute("ANALYZE workflow_workers")
        for key in range(1, workers + 1):
            session = await asyncpg.connect(settings.dsn)
            await session.execute(_TAKE, LIVENESS_LOCKS, key)
            sessions.append(session)
        check = await conn.prepare(DEAD.sql)
        for _ in range(5):
            await check.fetch()  # warm the plan and the buffers
        times = []
        for _ in range(iterations):
            started = time.perf_counter()
            found = await check.fetch()
            times.append((time.perf_counter() - started) * 1000)
            if found:
                raise RuntimeError(f"the check found {len(found)} dead workers; none is")
        claim = median((await timed_claims(conn, 32, 32, iterations))[0])
        result.add(
            Figure(
                name=(
                    f"check for dead workers (none): {workers} live sessions, "
                    f"{running:,} running, {pending:,} pending"
                ),
                unit="ms",
                value=median(times),
                floor=claim,
                better="lower",
                note="once per poll interval per worker; floor = a claim of 32 rows, same tables",
            )
        )
        # One worker dies: the next check finds it and ends its leases, in one transaction.
        async with PostgresStore(settings.url) as store:
            assert await store.end_dead_leases() == {}  # its check prepared, as a worker's is
            await sessions.pop().close()
            # The server ends the session just after the close: wait for its lock to be free.
            await conn.execute(_TAKE, LIVENESS_LOCKS, workers)
            await conn.execute(_GIVE, LIVENESS_LOCKS, workers)
            started = time.perf_counter()
            dead = await store.end_dead_leases()
            ended = (time.perf_counter() - started) * 1000
        if dead != {f"bench:worker-{workers}": running // workers}:
            raise RuntimeError(f"the check found {dead}, not the one dead worker")
        result.add(
            Figure(
                name=f"find one dead worker and end its {running // workers} leases",
                unit="ms",
                value=ended,
                floor=claim,
                better="lower",
                note="once per death (one trial; its update statements' first use)",
            )
        )
        result.details.update(workers=workers, running=running, pending=pending)
        for session in sessions:
            await session.close()
        sessions.clear()
        await _drains(settings, conn, result)
    finally:
        for session in sessions:
            await session.close()
        await reset(conn)
        await conn.close()


async def _drains(settings: Settings, conn: asyncpg.Connection, result: ScenarioResult) -> None:
    """A worker draining three-step workflows with its liveness session, beside one with
    it off, alternately: workflows per second and worker CPU per workflow."""
    count, trials = settings.pick(3000, 40), settings.pick(6, 1)
    off = settings.url + ("&" if "?" in settings.url else "?") + "durable_liveness=off"
    rates: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    async with PostgresStore(settings.url) as store:
        client = DurableClient(store)
        for trial in range(trials):
            for kind in ("on", "off") if trial % 2 == 0 else ("off", "on"):
                drained = await drain(
                    settings,
                    conn,
                    client,
                    kind="framework",
                    processes=1,
                    concurrency=32,
                    count=count,
                    url=None if kind == "on" else off,
                )
                rates[kind].append(drained.rate)
                cpu[kind].append(drained.cpu_us)
    result.add(
        Figure(
            name="drain, 1 worker at concurrency 32, liveness session on vs off",
            unit="workflows/s",
            value=median(rates["on"]),
            floor=median(rates["off"]),
            trials=rates["on"],
            floor_trials=rates["off"],
            note=(
                f"{count} three-step workflows per trial; worker CPU {median(cpu['on']):.0f} "
                f"vs {median(cpu['off']):.0f} us per workflow; floor = durable_liveness=off"
            ),
        )
    )
