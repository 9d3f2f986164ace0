"""Memory of a worker that has suspended 10,000 workflows: it must not grow with their number.

A worker (concurrency 32) first runs a warm-up through every waiting code path
(workflows that suspend in ``recv``, are sent a message, wake and finish);
its idle RSS is read after that. Then it runs ``bench.app.parked`` 10,000
times, in three batches (2,500, 2,500, 5,000): each runs a step and suspends,
half in ``recv`` with no timeout, half in an hour-long ``sleep``, so the
worker has seen every one of them suspend. After each batch, once the rows
are all ``waiting``, ``VmRSS`` is read again.

The floor is a second worker doing the same with ``parked(0.0)``: the same
body, step and journaled sleep, but the sleep is over at once, so each
workflow runs to completion instead of waiting. What the floor's RSS gains is
what running 10,000 workflows costs a process anyway (allocator arenas, caches);
what the waiting worker gains beyond it would be memory kept per waiting
workflow.
"""

from __future__ import annotations

import anyio
import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, reset
from bench.procs import Proc, fleet, wait_settled
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "memory_waiting"
TITLE = "Memory of a worker that has suspended 10,000 workflows (MiB above idle)"

CONCURRENCY = 32
TARGET_MIB = 2.0
"""Bound on the growth from the first quarter to all of the waiting workflows."""


async def _measure(
    settings: Settings,
    conn: asyncpg.Connection,
    client: DurableClient,
    *,
    kind: str,
    batches: list[int],
    warm: int,
) -> list[tuple[int, float]]:
    """``(workflows run so far, RSS MiB)`` after the warm-up and after each batch."""
    await reset(conn)
    with fleet(settings.url) as group:
        proc: Proc = group.start_worker(concurrency=CONCURRENCY)
        handles = await client.start_workflows(app.wait_for_go, [()] * warm)
        await wait_settled(conn, [proc], warm, timeout=60, status="waiting")
        for handle in handles:
            await client.send(handle.id, "warm-up", topic="go")
        await wait_settled(conn, [proc], warm, timeout=60)
        await anyio.sleep(0.5)
        series = [(0, proc.rss_kib() / 1024)]
        total = 0
        for size in batches:
            if kind == "waiting":
                arguments = [(None,) if i % 2 else (3600.0,) for i in range(size)]
            else:
                arguments = [(0.0,)] * size
            await client.start_workflows(app.parked, arguments)
            total += size
            if kind == "waiting":
                await wait_settled(conn, [proc], total, timeout=300, status="waiting")
            else:
                await wait_settled(conn, [proc], warm + total, timeout=300)
            await anyio.sleep(0.5)
            series.append((total, proc.rss_kib() / 1024))
        proc.check_alive()
    return series


async def run(settings: Settings, result: ScenarioResult) -> None:
    total = settings.pick(10_000, 200)
    batches = [total // 4, total // 4, total - 2 * (total // 4)]
    warm = settings.pick(2 * CONCURRENCY, 10)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    series: dict[str, list[tuple[int, float]]] = {}
    try:
        for kind in ("completed", "waiting"):
            series[kind] = await _measure(
                settings, conn, client, kind=kind, batches=batches, warm=warm
            )
    finally:
        await reset(conn)
        await store.close()
        await conn.close()

    def above_idle(kind: str, at: int = -1) -> float:
        return series[kind][at][1] - series[kind][0][1]

    def growth(kind: str) -> float:
        return series[kind][-1][1] - series[kind][1][1]

    first = batches[0]
    idle_note = (
        f"idle worker {series['waiting'][0][1]:.1f} MiB (floor's {series['completed'][0][1]:.1f});"
        " floor = a worker running the same number of the same workflow to completion"
    )
    result.add(
        Figure(
            name=f"{total:,} waiting, RSS above idle",
            unit="MiB",
            value=above_idle("waiting"),
            floor=above_idle("completed"),
            better="lower",
            note=idle_note,
        )
    )
    figure = Figure(
        name=f"growth from {first:,} to {total:,} waiting",
        unit="MiB",
        value=growth("waiting"),
        floor=growth("completed"),
        better="lower",
        target=f"< {TARGET_MIB:g} MiB",
        note=(
            f"{(growth('waiting') * 1024 * 1024) / (total - first):.0f} bytes per further "
            f"waiting workflow (floor {(growth('completed') * 1024 * 1024) / (total - first):.0f})"
        ),
    )
    figure.met = figure.value < TARGET_MIB
    result.add(figure)
    result.details["rss_mib_after"] = {
        kind: {str(count): mib for count, mib in points} for kind, points in series.items()
    }
