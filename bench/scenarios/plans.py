"""Plans that do not degrade: sequential scans per workflow, and drains from an empty database.

Every drain starts from an empty database: the durable tables are dropped and made
again (no statistics, never analysed), a real worker starts beside them and claims
once (finding nothing, it listens), then a backlog of three-step workflows is
enqueued and drained. The worker's statements are thus prepared on empty tables,
the case where a plan frozen on its first run (``plan_cache_mode =
force_generic_plan`` with sequential scans allowed) scanned ``workflows``
once per claimed workflow in about half of the drains.

Two figures per concurrency (32 and 1):

- sequential scans per workflow: ``seq_scan`` of ``pg_stat_user_tables`` summed over
  the durable tables, after the drain minus before, divided by the workflows. Every
  session of the drain (the worker's, the enqueueing store's) has ended before the
  counters are read, so each has flushed its counts; the bench's own polling is
  counted in its transactions (``pg_stat_xact_user_tables``) and taken off;
- the spread of the drains' throughput: the largest distance of a drain from the
  median of its kind, in percent (target: every drain within 15%).

The store plans each statement once per connection, never as a sequential scan
(``force_generic_plan``, ``enable_seqscan = off``). The floor of each figure is the
same drains with the worker's URL carrying ``?plan_cache_mode=auto&enable_seqscan=on``
(PostgreSQL's own choice, the store's setting before), alternating with the store's
own settings drain by drain. At concurrency 1 a diagnostic row runs the same drains
with ``?enable_seqscan=on`` (generic plans that may scan), and a last row the store's
and PostgreSQL's own choice beside 10,000 settled workflows, analysed (tables with
statistics, where PostgreSQL's choice re-plans the claim and the settle on every
call).
"""

from __future__ import annotations

import time

import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, prepare_schema
from bench.procs import fleet, listeners, wait_listening, worker_backends
from durable_core import DurableClient
from durable_core.sql.schema import WORKFLOW_TABLES, metadata, schema_versions
from durable_postgres import PostgresStore

NAME = "plans"
TITLE = "Plans from an empty database: sequential scans per workflow, drain spread"

TABLES = [table.name for table in metadata.sorted_tables if table is not schema_versions]
"""The durable tables whose sequential scans count (not the one-row versions table)."""
AUTO = "plan_cache_mode=auto&enable_seqscan=on"
SCANS_ALLOWED = "enable_seqscan=on"
SPREAD_TARGET = 15.0
HISTORY = 10_000
_SCANS = (
    "SELECT coalesce(sum(seq_scan), 0)::bigint FROM {view} WHERE schemaname = current_schema()"
    " AND relname = ANY($1::text[])"
)


_HISTORY = (
    "INSERT INTO workflows (id, name, status, input, output, attempts, max_attempts, run_at,"
    " created_at, updated_at, completed_at, started_at) SELECT 'h-' || g, 'bench.history',"
    " 'succeeded', '[]', '1', 1, 3, now(), now(), now(), now(), now()"
    " FROM generate_series(1, $1) g"
)
_HISTORY_STEPS = (
    "INSERT INTO workflow_steps (workflow_id, step_index, step_name, status, input, output,"
    " started_at, completed_at) SELECT id, i, 'bench.step', 'succeeded', '[]', '1', now(), now()"
    " FROM workflows, generate_series(0, 2) i WHERE name = 'bench.history'"
)


def _with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


async def _seq_scans(conn: asyncpg.Connection) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    scans: int = await conn.fetchval(_SCANS.format(view="pg_stat_user_tables"), TABLES)
    return scans


async def _settled(conn: asyncpg.Connection) -> tuple[int, int]:
    """Succeeded workflows, and the sequential scans this query itself made."""
    xact = _SCANS.format(view="pg_stat_xact_user_tables")
    async with conn.transaction():
        first = await conn.fetchval(xact, TABLES)
        done = await conn.fetchval(
            "SELECT count(*) FROM workflows WHERE status = 'succeeded' AND name = $1",
            app.three_steps.name,
        )
        own = await conn.fetchval(xact, TABLES) - first
    return int(done), int(own)


async def _sessions_gone(conn: asyncpg.Connection, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while await worker_backends(conn):
        if time.monotonic() > deadline:
            raise TimeoutError("the drain's sessions did not end")
        await conn.execute("SELECT pg_sleep(0.05)")


async def drain(
    settings: Settings,
    conn: asyncpg.Connection,
    *,
    url: str,
    concurrency: int,
    count: int,
    history: int = 0,
) -> tuple[float, float]:
    """One drain from an empty database (or one with ``history`` succeeded workflows,
    three steps each, analysed): (workflows/s, sequential scans per workflow)."""
    await conn.execute(f"DROP TABLE IF EXISTS {WORKFLOW_TABLES}, {schema_versions.name} CASCADE")
    await prepare_schema(settings.url)
    if history:
        await conn.execute(_HISTORY, history)
        await conn.execute(_HISTORY_STEPS)
        await conn.execute("ANALYZE")
    await _sessions_gone(conn)
    before = await _seq_scans(conn)
    own = 0
    with fleet(settings.url) as group:
        listening = await listeners(conn)
        proc = group.start_worker(concurrency=concurrency, url=url)
        await wait_listening(conn, [proc], listening + 1)
        async with PostgresStore(settings.url) as store:
            await DurableClient(store).start_workflows(
                app.three_steps, [(i,) for i in range(count)]
            )
        deadline = time.monotonic() + (30 if settings.smoke else 300)
        while True:
            done, scans = await _settled(conn)
            own += scans
            if done >= count:
                break
            proc.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {done} of {count} workflows succeeded")
            await conn.execute("SELECT pg_sleep(0.05)")
    await _sessions_gone(conn)
    scans_per_workflow = (await _seq_scans(conn) - before - own) / count
    span = await conn.fetchval(
        "SELECT extract(epoch FROM max(w.completed_at) - min(s.started_at)) FROM workflows w"
        " JOIN workflow_steps s ON s.workflow_id = w.id WHERE w.name = $1",
        app.three_steps.name,
    )
    return count / float(span), scans_per_workflow


def _spread(rates: list[float]) -> float:
    """The largest distance of one rate from the median, in percent of the median."""
    middle = median(rates)
    return max(abs(rate - middle) for rate in rates) / middle * 100


async def run(settings: Settings, result: ScenarioResult) -> None:
    # (concurrency, workflows per drain, drains of each kind)
    configs = [
        (32, settings.pick(3000, 40), settings.pick(10, 1)),
        (1, settings.pick(300, 10), settings.pick(3, 1)),
    ]
    conn = await asyncpg.connect(settings.dsn)
    try:
        for concurrency, count, drains in configs:
            kinds = {"store": settings.url, "auto": _with_option(settings.url, AUTO)}
            if concurrency == 1 and not settings.smoke:
                kinds["scans allowed"] = _with_option(settings.url, SCANS_ALLOWED)
            rates: dict[str, list[float]] = {kind: [] for kind in kinds}
            scans: dict[str, list[float]] = {kind: [] for kind in kinds}
            for trial in range(drains):
                order = list(kinds) if trial % 2 == 0 else list(kinds)[::-1]
                for kind in order:
                    rate, per = await drain(
                        settings, conn, url=kinds[kind], concurrency=concurrency, count=count
                    )
                    rates[kind].append(rate)
                    scans[kind].append(per)
            label = f"concurrency {concurrency}, {count} workflows x {drains} drains"
            scan = result.add(
                Figure(
                    name=f"sequential scans per workflow, {label}",
                    unit="scans",
                    value=max(scans["store"]),
                    floor=max(scans["auto"]),
                    better="lower",
                    trials=scans["store"],
                    floor_trials=scans["auto"],
                    note=f"worst drain; floor = the same drains with ?{AUTO}",
                )
            )
            if concurrency == 1:
                scan.target = "< 0.05 (none on the hot path)"
                scan.met = scan.value < 0.05
            spread = result.add(
                Figure(
                    name=f"drain spread from an empty database, {label}",
                    unit="%",
                    value=_spread(rates["store"]),
                    floor=_spread(rates["auto"]),
                    better="lower",
                    trials=rates["store"],
                    floor_trials=rates["auto"],
                    note=(
                        f"largest distance from the median drain ({median(rates['store']):.0f}"
                        f" workflows/s; floor {median(rates['auto']):.0f}); trials are "
                        f"workflows/s; floor = the same drains with ?{AUTO}"
                    ),
                )
            )
            if concurrency == 32 and drains >= 10:
                spread.target = f"<= {SPREAD_TARGET:g}%"
                spread.met = spread.value <= SPREAD_TARGET
            if "scans allowed" in kinds:
                result.add(
                    Figure(
                        name=f"sequential scans per workflow, {label}, ?{SCANS_ALLOWED} "
                        "(diagnostic)",
                        unit="scans",
                        value=max(scans["scans allowed"]),
                        better="lower",
                        trials=scans["scans allowed"],
                        note=f"{median(rates['scans allowed']):.0f} workflows/s (store's "
                        f"{median(rates['store']):.0f})",
                    )
                )
            result.details[label] = {"workflows_per_second": rates, "seq_scans": scans}
        if not settings.smoke:
            # The same drains at concurrency 1 beside settled, analysed history: what the
            # sequential scans above become once the tables have statistics.
            count, drains = 300, 3
            beside: dict[str, list[tuple[float, float]]] = {"store": [], "auto": []}
            urls = {"store": settings.url, "auto": _with_option(settings.url, AUTO)}
            for trial in range(drains):
                for kind in list(urls) if trial % 2 == 0 else list(urls)[::-1]:
                    beside[kind].append(
                        await drain(
                            settings,
                            conn,
                            url=urls[kind],
                            concurrency=1,
                            count=count,
                            history=HISTORY,
                        )
                    )
            history, auto = beside["store"], beside["auto"]
            figure = result.add(
                Figure(
                    name=f"sequential scans per workflow, concurrency 1, {count} workflows x "
                    f"{drains} drains, {HISTORY:,} settled workflows beside, analysed",
                    unit="scans",
                    value=max(per for _, per in history),
                    floor=max(per for _, per in auto),
                    better="lower",
                    trials=[per for _, per in history],
                    floor_trials=[per for _, per in auto],
                    target="< 0.05 (none on the hot path)",
                    note=f"{median([rate for rate, _ in history]):.0f} workflows/s (floor's "
                    f"{median([rate for rate, _ in auto]):.0f}); floor = the same drains with "
                    f"?{AUTO}",
                )
            )
            figure.met = figure.value < 0.05
    finally:
        await conn.close()
