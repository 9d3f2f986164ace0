"""Peak memory of a worker process holding 1,000 workflows in flight at once.

The worker runs at concurrency 1,000; each workflow sits in a step that sleeps.
The idle RSS is read after a warm-up batch has run through every code path;
the peak is the largest ``VmRSS`` sampled while the 1,000 run. The floor is a
bare-asyncpg process holding the same 1,000 rows through the same statements.
The run checks from server timestamps that all of them were in flight together.
"""

from __future__ import annotations

import anyio
import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.procs import Proc, fleet, wait_settled
from durable_core import DurableClient
from durable_core.codec import encode_arguments
from durable_postgres import PostgresStore

NAME = "memory"
TITLE = "Memory of a worker holding 1,000 in-flight workflows (MiB above idle)"

TARGET_MIB = 20.0


async def _measure(
    settings: Settings,
    conn: asyncpg.Connection,
    client: DurableClient,
    *,
    kind: str,
    in_flight: int,
    hold: float,
) -> dict[str, float]:
    await reset(conn)
    with fleet(settings.url) as group:
        proc: Proc
        if kind == "floor":
            proc = group.start_floor(concurrency=in_flight, steps=1, sleep=-1)
        else:
            proc = group.start_worker(concurrency=in_flight)
        warm = min(in_flight, 50)
        await client.start_workflows(app.holding, [(0.0,)] * warm)
        await wait_settled(conn, [proc], warm, timeout=60)
        await anyio.sleep(0.5)
        idle = proc.rss_kib()
        await client.start_workflows(app.holding, [(hold,)] * in_flight)
        peak = idle
        done = 0
        while done < warm + in_flight:
            proc.check_alive()
            peak = max(peak, proc.rss_kib())
            done = await conn.fetchval("SELECT count(*) FROM workflows WHERE status = 'succeeded'")
            await anyio.sleep(0.02)
        hwm = proc.rss_kib("VmHWM")
    together = await conn.fetchval(
        "SELECT max(s.started_at) < min(s.completed_at) FROM workflow_steps s "
        "JOIN workflows w ON w.id = s.workflow_id WHERE w.input <> $1",
        encode_arguments((0.0,), {}, what="warm-up input"),
    )
    if not together:
        raise RuntimeError(f"{kind}: the {in_flight} workflows were not all in flight at once")
    return {"idle_mib": idle / 1024, "peak_mib": peak / 1024, "hwm_mib": hwm / 1024}


async def run(settings: Settings, result: ScenarioResult) -> None:
    in_flight = settings.pick(1000, 50)
    hold = settings.pick(6, 2)
    trials = settings.pick(2, 1)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    samples: dict[str, list[dict[str, float]]] = {"floor": [], "framework": []}
    try:
        for trial in range(trials):
            order = ("floor", "framework") if trial % 2 == 0 else ("framework", "floor")
            for kind in order:
                samples[kind].append(
                    await _measure(
                        settings, conn, client, kind=kind, in_flight=in_flight, hold=hold
                    )
                )
    finally:
        await reset(conn)
        await store.close()
        await conn.close()

    def delta(kind: str) -> list[float]:
        return [s["peak_mib"] - s["idle_mib"] for s in samples[kind]]

    figure = Figure(
        name=f"{in_flight:,} in flight, peak RSS above idle",
        unit="MiB",
        value=median(delta("framework")),
        floor=median(delta("floor")),
        better="lower",
        trials=delta("framework"),
        floor_trials=delta("floor"),
        target=f"< {TARGET_MIB:g} MiB",
        note=(
            f"idle worker {median([s['idle_mib'] for s in samples['framework']]):.1f} MiB, "
            f"idle floor {median([s['idle_mib'] for s in samples['floor']]):.1f} MiB"
        ),
    )
    figure.met = figure.value < TARGET_MIB
    result.add(figure)
    result.details["samples"] = samples
