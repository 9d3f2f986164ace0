"""Worker processes on one machine: ``durable worker --processes 2`` against one process.

Each trial drains the same backlog of three-step workflows with one worker process
(``--processes 1``: no supervisor) and with ``--processes 2`` (a supervisor and two worker
processes, each with its own claim loop at the same concurrency), the order alternating
from trial to trial. Throughput is measured as :mod:`bench.scenarios.e2e` measures it
(server timestamps, the first step's start to the last completion), once every process
listens. Issue 20's target: two processes at least 1.8x one on a 2-core machine. The
figure's note gives the load average before and after, without which the ratio means
little on a machine busy with other work. A smoke run drains with two processes only
(the path this scenario adds; :mod:`bench.scenarios.e2e` drains with one).
"""

from __future__ import annotations

import os

import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.procs import children, cpu_seconds, fleet, listeners, wait_listening, wait_settled
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "processes"
TITLE = "Worker processes on one machine: --processes 2 against 1 (workflows/s)"

TARGET = 1.8
"""Issue 20: two worker processes against one, on two cores."""

CONCURRENCY = 32
"""Per worker process."""


async def drain(
    settings: Settings, conn: asyncpg.Connection, client: DurableClient, processes: int, count: int
) -> tuple[float, float]:
    """Workflows per second of ``durable worker --processes N`` draining ``count``
    three-step workflows, and the CPU microseconds per workflow of all its processes."""
    await reset(conn)
    with fleet(settings.url) as group:
        before = await listeners(conn)
        proc = group.start_worker(concurrency=CONCURRENCY, processes=processes)
        await wait_listening(conn, [proc], before + processes)
        pids = [proc.pid, *children(proc.pid)]
        cpu_before = sum(cpu_seconds(pid) for pid in pids)
        await client.start_workflows(app.three_steps, [(i,) for i in range(count)])
        await wait_settled(conn, [proc], count, timeout=30 if settings.smoke else 300)
        cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
    span = await conn.fetchval(
        "SELECT extract(epoch FROM (SELECT max(completed_at) FROM workflows)"
        " - (SELECT min(started_at) FROM workflow_steps))"
    )
    steps = await conn.fetchval("SELECT count(*) FROM workflow_steps WHERE status = 'succeeded'")
    if steps != 3 * count:
        raise RuntimeError(f"{processes} processes: {steps} succeeded steps for {count} workflows")
    return count / float(span), cpu / count * 1e6


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(5, 1)
    count = settings.pick(3000, 20)
    kinds = [2] if settings.smoke else [1, 2]
    rates: dict[int, list[float]] = {kind: [] for kind in (1, 2)}
    cpu: dict[int, list[float]] = {kind: [] for kind in (1, 2)}
    load_before = os.getloadavg()
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        for trial in range(trials):
            for processes in kinds if trial % 2 == 0 else kinds[::-1]:
                rate, cpu_us = await drain(settings, conn, client, processes, count)
                rates[processes].append(rate)
                cpu[processes].append(cpu_us)
    finally:
        await store.close()
        await conn.close()
    load_after = os.getloadavg()
    figure = result.add(
        Figure(
            name=f"2 worker processes / 1, concurrency {CONCURRENCY} each",
            unit="workflows/s",
            value=median(rates[2]),
            floor=median(rates[1]) if rates[1] else None,
            trials=rates[2],
            floor_trials=rates[1],
            target=f">= {TARGET:g}x",
            note=(
                f"floor = one process; {count} workflows per trial, {os.cpu_count()} cores; "
                f"CPU per workflow {median(cpu[2]):.0f} us (2 processes, supervisor included) "
                f"against {median(cpu[1]):.0f} us; load average "
                f"{load_before[0]:.1f} before, {load_after[0]:.1f} after"
            ),
        )
    )
    figure.met = None if figure.ratio is None else figure.ratio >= TARGET
    result.details.update(
        {
            "count": count,
            "concurrency": CONCURRENCY,
            "workflows_per_second": rates,
            "cpu_us_per_workflow": cpu,
            "load_average": {"before": load_before, "after": load_after},
        }
    )
