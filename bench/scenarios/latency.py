"""Enqueue-to-start latency on an idle worker, woken by ``NOTIFY`` and by polling alone.

A sample is one workflow enqueued while the worker is idle; its latency is the
server's ``started_at`` of its first step minus the row's ``created_at`` (both
``now()`` of their statements, so no client clock is involved). Enqueues are
spaced at random so that polling is sampled at every phase. Polling alone
turns ``LISTEN`` off with the URL option ``durable_listen=off`` (the floor
with ``--no-listen``); both poll at the default interval.
"""

from __future__ import annotations

import random

import anyio
import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, percentile, reset
from bench.procs import Proc, fleet, wait_settled
from durable_core import DurableClient
from durable_core.runtime.config import WorkflowConfig
from durable_postgres import PostgresStore

NAME = "latency"
TITLE = "Enqueue-to-start latency on an idle worker (ms)"

POLL_MS = int(WorkflowConfig().poll_interval_ms)
SMOKE_POLL_MS = 200
CONCURRENCY = int(WorkflowConfig().concurrency)
TARGET_P50_MS = 5.0
TARGET_P99_MS = 25.0


def _with_option(url: str, option: str) -> str:
    return url + ("&" if "?" in url else "?") + option


async def _sample(
    settings: Settings,
    conn: asyncpg.Connection,
    client: DurableClient,
    *,
    kind: str,
    listen: bool,
    samples: int,
    poll_ms: int,
) -> list[float]:
    """Latencies in ms of ``samples`` workflows started one by one on an idle worker."""
    await reset(conn)
    with fleet(settings.url) as group:
        proc: Proc
        if kind == "floor":
            proc = group.start_floor(
                concurrency=CONCURRENCY, steps=1, poll_ms=poll_ms, listen=listen
            )
        else:
            url = settings.url if listen else _with_option(settings.url, "durable_listen=off")
            proc = group.start_worker(concurrency=CONCURRENCY, poll_ms=poll_ms, url=url)
        await client.start_workflow(app.one_step)  # warm-up: the worker is up and idle
        await wait_settled(conn, [proc], 1, timeout=60)
        ids: list[str] = []
        gap = (0.005, 0.03) if listen else (0.0, poll_ms / 1000)
        for done in range(2, samples + 2):
            await anyio.sleep(random.uniform(*gap))
            handle = await client.start_workflow(app.one_step)
            ids.append(handle.id)
            await wait_settled(conn, [proc], done, timeout=10 + 2 * poll_ms / 1000)
    rows = await conn.fetch(
        "SELECT extract(epoch FROM s.started_at - w.created_at) * 1000 FROM workflows w "
        "JOIN workflow_steps s ON s.workflow_id = w.id AND s.step_index = 0 "
        "WHERE w.id = ANY($1::text[])",
        ids,
    )
    return [float(row[0]) for row in rows]


async def run(settings: Settings, result: ScenarioResult) -> None:
    blocks = 2
    poll_ms = settings.pick(POLL_MS, SMOKE_POLL_MS)
    modes = [
        ("NOTIFY", True, settings.pick(100, 5)),
        (f"polling alone ({poll_ms} ms)", False, settings.pick(15, 2)),
    ]
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        for label, listen, per_block in modes:
            latencies: dict[str, list[float]] = {"floor": [], "framework": []}
            for block in range(blocks):
                order = ("floor", "framework") if block % 2 == 0 else ("framework", "floor")
                for kind in order:
                    latencies[kind] += await _sample(
                        settings,
                        conn,
                        client,
                        kind=kind,
                        listen=listen,
                        samples=per_block,
                        poll_ms=poll_ms,
                    )
            for q, target in ((50, TARGET_P50_MS), (99, TARGET_P99_MS)):
                figure = Figure(
                    name=f"{label}, p{q}",
                    unit="ms",
                    value=percentile(latencies["framework"], q),
                    floor=percentile(latencies["floor"], q),
                    better="lower",
                    note=f"{len(latencies['framework'])} samples each",
                )
                if listen:
                    figure.target = f"< {target:g} ms"
                    figure.met = figure.value < target
                result.add(figure)
            result.details[label] = {
                "framework_ms": latencies["framework"],
                "floor_ms": latencies["floor"],
                "framework_median_ms": median(latencies["framework"]),
            }
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
