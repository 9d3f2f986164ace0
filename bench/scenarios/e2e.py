"""End-to-end throughput: worker processes draining a backlog of three-step workflows.

Each trial empties the tables, starts the processes and waits until each one
listens (idle, having found nothing), then enqueues the whole backlog in one
statement. Throughput is the backlog size over the span from the first step's
``started_at`` (the first claim's round trip earlier) to the last
``completed_at`` (the last settle): server timestamps, so process start-up and
the bench's own polling are excluded. Floor and framework trials alternate
(ABBA) and the median of the trials is reported.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, reset
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
) -> Trial:
    """One trial: throughput, worker CPU and server CPU per workflow.

    ``prepare`` fills the emptied tables before any worker starts (``e2e_waiting``);
    the figures count the drained workflows (``three_steps``) only.
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
            else:
                procs.append(group.start_worker(concurrency=concurrency))
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


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(5, 1)
    configs = [
        ("1 worker, concurrency 1", 1, 1, settings.pick(500, 20)),
        ("1 worker, concurrency 8", 1, 8, settings.pick(2500, 40)),
        ("1 worker, concurrency 32", 1, 32, settings.pick(3000, 40)),
        ("1 worker, concurrency 128", 1, 128, settings.pick(3000, 40)),
        ("2 workers, concurrency 32 each", 2, 32, settings.pick(3000, 40)),
    ]
    if settings.smoke:
        configs = [configs[1], configs[4]]
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        for label, processes, concurrency, count in configs:
            figures: dict[str, list[float]] = {"floor": [], "framework": []}
            cpu: dict[str, list[float]] = {"floor": [], "framework": []}
            for trial in range(trials):
                order = ("floor", "framework") if trial % 2 == 0 else ("framework", "floor")
                for kind in order:
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
            figure = Figure(
                name=label,
                unit="workflows/s",
                value=median(figures["framework"]),
                floor=median(figures["floor"]),
                trials=figures["framework"],
                floor_trials=figures["floor"],
                note=(
                    f"{count} workflows per trial; worker CPU {median(cpu['framework']):.0f} us"
                    f" per workflow (floor {median(cpu['floor']):.0f} us)"
                ),
            )
            if processes == 1:
                figure.target = f">= {TARGET_RATIO:.0%} of floor"
                figure.met = (figure.ratio or 0) >= TARGET_RATIO
            result.add(figure)
            result.details[label] = {
                "processes": processes,
                "concurrency": concurrency,
                "count": count,
                "cpu_us_per_workflow": cpu,
            }
    finally:
        await store.close()
        await conn.close()
