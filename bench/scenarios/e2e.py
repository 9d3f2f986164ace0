"""End-to-end throughput: worker processes draining a backlog of three-step workflows.

Each trial empties the tables, starts the processes and waits until each one
listens (idle, having found nothing), then enqueues the whole backlog in one
statement. Throughput is the backlog size over the span from the first step's
``started_at`` (the first claim's round trip earlier) to the last
``completed_at`` (the last settle): server timestamps, so process start-up and
the bench's own polling are excluded. The kinds of worker take turns, their
order rotated and reversed from trial to trial, and the median of the trials is
reported.

Every figure is set beside the store-statements floor (:mod:`bench.floor`); at
concurrency 1, 32 and 128 also beside the naive floor (:mod:`bench.naive_floor`),
the group-commit floor (:mod:`bench.group_floor`) and DBOS
(:mod:`bench.dbos_peer`, when the ``dbos`` package is installed; otherwise the
figure says it was skipped), with issue 13's targets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import anyio
import asyncpg

from bench import app, dbos_peer
from bench.common import (
    Figure,
    ScenarioResult,
    Settings,
    ensure_database,
    median,
    plain_dsn,
    reset,
)
from bench.procs import (
    Proc,
    fleet,
    listeners,
    server_cpu,
    wait_listening,
    wait_settled,
    worker_backends,
)
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "e2e"
TITLE = "End-to-end throughput, three trivial steps per workflow (workflows/s)"

TARGET_RATIO = 0.70
"""One worker against the store-statements floor (:mod:`bench.floor`)."""

OWN_FLOORS = ("naive", "group")
"""The floors with their own SQL: :mod:`bench.naive_floor`, :mod:`bench.group_floor`."""

TARGETS: dict[tuple[int, str], float] = {
    (1, "naive floor"): 0.9,
    (32, "naive floor"): 3.0,
    (32, "group-commit floor"): 0.5,
    (32, "DBOS"): 50.0,
}
"""Issue 13's targets: (concurrency, compared with) -> least ratio."""

CPU_TARGET_US = 400
"""Issue 13: worker CPU per three-step workflow at concurrency 32."""

DBOS_POLL_MS = 50


class Trial(NamedTuple):
    """What one drain measured."""

    rate: float
    """Workflows per second."""
    cpu_us: float
    """Worker CPU microseconds per workflow."""
    server_cpu_us: float
    """CPU microseconds per workflow of the server processes serving the workers (NaN
    when ``/proc`` does not show them)."""


async def drain(
    settings: Settings,
    conn: asyncpg.Connection,
    client: DurableClient,
    *,
    kind: str,
    processes: int,
    concurrency: int,
    count: int,
    prepare: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
    url: str | None = None,
) -> Trial:
    """One trial: throughput, worker CPU and server CPU per workflow.

    ``prepare`` fills the emptied tables before any worker starts (``e2e_waiting``);
    the figures count the drained workflows (``three_steps``) only. ``url`` is the
    framework workers' (the bench's, with options, say), if not ``settings.url``.
    """
    await reset(conn)
    settled = 0
    if prepare is not None:
        await prepare(conn)
        settled = await conn.fetchval("SELECT count(*) FROM workflows WHERE status = 'succeeded'")
    bench_sessions = await worker_backends(conn)  # the bench's own store
    with fleet(settings.url) as group:
        before = await listeners(conn)
        procs: list[Proc] = []
        for _ in range(processes):
            if kind == "floor":
                procs.append(group.start_floor(concurrency=concurrency))
            elif kind in OWN_FLOORS:
                procs.append(group.start_own_floor(kind, concurrency=concurrency))
            else:
                procs.append(group.start_worker(concurrency=concurrency, url=url))
        await wait_listening(conn, procs, before + processes)
        cpu_before = sum(proc.cpu_seconds() for proc in procs)
        server_before = await server_cpu(conn, bench_sessions)
        await client.start_workflows(app.three_steps, [(i,) for i in range(count)])
        await wait_settled(conn, procs, settled + count, timeout=30 if settings.smoke else 180)
        cpu = sum(proc.cpu_seconds() for proc in procs) - cpu_before
        server_after = await server_cpu(conn, bench_sessions)
    server = sum(used - server_before.get(pid, 0.0) for pid, used in server_after.items())
    # The drained workflows only: ``prepare`` may have put others in the tables.
    span = await conn.fetchval(
        "SELECT extract(epoch FROM (SELECT max(completed_at) FROM workflows WHERE name = $1)"
        " - (SELECT min(s.started_at) FROM workflow_steps s"
        " JOIN workflows w ON w.id = s.workflow_id AND w.name = $1))",
        app.three_steps.name,
    )
    steps = await conn.fetchval(
        "SELECT count(*) FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id"
        " WHERE s.status = 'succeeded' AND w.name = $1",
        app.three_steps.name,
    )
    if steps != 3 * count:
        raise RuntimeError(
            f"{kind}: {steps} succeeded steps for {count} workflows, expected 3 each"
        )
    return Trial(
        count / float(span), cpu / count * 1e6, server / count * 1e6 if server_after else math.nan
    )


async def drain_dbos(settings: Settings, *, concurrency: int, count: int) -> Trial:
    """One DBOS trial: the same drain as :func:`drain`, DBOS's worker on its own database.

    The backlog is enqueued in one transaction once the worker is up; the span runs from
    the first dequeue to the last completion, as DBOS records them (its process clock,
    milliseconds). Server CPU is not measured (NaN).
    """
    url = dbos_peer.peer_url(settings.url)
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        await conn.execute(dbos_peer.RESET_SQL)
        with fleet(settings.url) as group:
            proc = group.start_dbos(url, concurrency=concurrency, poll_ms=DBOS_POLL_MS)
            await proc.wait_for_line("ready")
            cpu_before = proc.cpu_seconds()
            await anyio.to_thread.run_sync(dbos_peer.enqueue, url, count)
            deadline = time.monotonic() + (60 if settings.smoke else 600)
            while True:
                done, total, span = await conn.fetchrow(dbos_peer.SPAN_SQL, dbos_peer.WORKFLOW)
                if done >= count:
                    break
                proc.check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"dbos: only {done} of {total} workflows succeeded")
                await anyio.sleep(0.1)
            cpu = proc.cpu_seconds() - cpu_before
        steps = await conn.fetchval(dbos_peer.STEPS_SQL, dbos_peer.WORKFLOW)
    finally:
        await conn.close()
    if steps != 3 * count:
        raise RuntimeError(f"dbos: {steps} recorded steps for {count} workflows, expected 3 each")
    return Trial(count / float(span), cpu / count * 1e6, math.nan)


def _order(kinds: list[str], trial: int) -> list[str]:
    """The kinds rotated by one per trial and reversed every other trial."""
    shift = (trial // 2) % len(kinds)
    order = kinds[shift:] + kinds[:shift]
    return order if trial % 2 == 0 else order[::-1]


def _comparisons(
    label: str,
    concurrency: int,
    figures: dict[str, list[float]],
    cpu: dict[str, list[float]],
    dbos: str,
) -> list[Figure]:
    """The framework's figure against the naive floor, the group-commit floor and DBOS,
    with issue 13's targets where it sets one; and its CPU per workflow."""
    value = median(figures["framework"])
    out = []
    for kind, title in (("naive", "naive floor"), ("group", "group-commit floor")):
        out.append(
            Figure(
                name=f"{label} / {title}",
                unit="workflows/s",
                value=value,
                floor=median(figures[kind]),
                trials=figures["framework"],
                floor_trials=figures[kind],
                note=f"{title} worker CPU {median(cpu[kind]):.0f} us per workflow",
            )
        )
    peer = Figure(
        name=f"{label} / DBOS",
        unit="workflows/s",
        value=value,
        floor=median(figures["dbos"]),
        trials=figures["framework"],
        floor_trials=figures["dbos"],
        note=(
            f"DBOS {dbos}, queue worker_concurrency {concurrency}, {DBOS_POLL_MS} ms poll; "
            f"worker CPU {median(cpu['dbos']):.0f} us per workflow"
            if figures["dbos"]
            else dbos
        ),
    )
    out.append(peer)
    for figure in out:
        target = TARGETS.get((concurrency, figure.name.rsplit(" / ", 1)[1]))
        if target is not None:
            figure.target = f">= {target:g}x"
            figure.met = None if figure.ratio is None else figure.ratio >= target
    if concurrency == 32:
        out.append(
            Figure(
                name=f"{label}: worker CPU per workflow",
                unit="us",
                value=median(cpu["framework"]),
                floor=median(cpu["naive"]),
                better="lower",
                trials=cpu["framework"],
                floor_trials=cpu["naive"],
                target=f"< {CPU_TARGET_US} us",
                met=median(cpu["framework"]) < CPU_TARGET_US,
                note="floor = naive floor's; /proc/PID/stat over the drain, same trials",
            )
        )
    return out


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(5, 1)
    dbos_trials = settings.pick(3, 1)
    # (label, processes, concurrency, workflows per trial, DBOS workflows per trial or 0)
    configs = [
        ("1 worker, concurrency 1", 1, 1, settings.pick(500, 20), settings.pick(60, 10)),
        ("1 worker, concurrency 8", 1, 8, settings.pick(2500, 40), 0),
        ("1 worker, concurrency 32", 1, 32, settings.pick(3000, 40), settings.pick(400, 20)),
        ("1 worker, concurrency 128", 1, 128, settings.pick(3000, 40), settings.pick(400, 20)),
        ("2 workers, concurrency 32 each", 2, 32, settings.pick(3000, 40), 0),
    ]
    if settings.smoke:
        configs = [configs[1], configs[2], configs[4]]
    dbos = dbos_peer.available()
    if dbos is None:
        dbos_note = "skipped: the dbos package is not installed (pip install -e '.[bench]')"
        print(f"bench: e2e: DBOS figures {dbos_note}", flush=True)
    else:
        await ensure_database(dbos_peer.peer_url(settings.url))
        dbos_note = dbos
    result.details["dbos"] = dbos_note
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        for label, processes, concurrency, count, dbos_count in configs:
            compare = bool(dbos_count)
            kinds = ["floor", "framework", *(OWN_FLOORS if compare else ())]
            figures: dict[str, list[float]] = {kind: [] for kind in [*kinds, "dbos"]}
            cpu: dict[str, list[float]] = {kind: [] for kind in [*kinds, "dbos"]}
            for trial in range(trials):
                for kind in _order(kinds, trial):
                    rate, cpu_us, _ = await drain(
                        settings,
                        conn,
                        client,
                        kind=kind,
                        processes=processes,
                        concurrency=concurrency,
                        count=count,
                    )
                    figures[kind].append(rate)
                    cpu[kind].append(cpu_us)
            if compare and dbos is not None:
                for _ in range(dbos_trials):
                    rate, cpu_us, _ = await drain_dbos(
                        settings, concurrency=concurrency, count=dbos_count
                    )
                    figures["dbos"].append(rate)
                    cpu["dbos"].append(cpu_us)
            figure = Figure(
                name=label,
                unit="workflows/s",
                value=median(figures["framework"]),
                floor=median(figures["floor"]),
                trials=figures["framework"],
                floor_trials=figures["floor"],
                note=(
                    f"floor = store-statements floor; {count} workflows per trial; worker CPU "
                    f"{median(cpu['framework']):.0f} us per workflow"
                    f" (floor {median(cpu['floor']):.0f} us)"
                ),
            )
            if processes == 1:
                figure.target = f">= {TARGET_RATIO:.0%} of floor"
                figure.met = (figure.ratio or 0) >= TARGET_RATIO
            result.add(figure)
            if compare:
                for extra in _comparisons(label, concurrency, figures, cpu, dbos_note):
                    result.add(extra)
            result.details[label] = {
                "processes": processes,
                "concurrency": concurrency,
                "count": count,
                "dbos_count": dbos_count if dbos is not None else 0,
                "workflows_per_second": figures,
                "cpu_us_per_workflow": cpu,
            }
    finally:
        await store.close()
        await conn.close()
