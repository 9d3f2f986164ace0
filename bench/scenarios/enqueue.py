"""Enqueue throughput: ``start_workflow`` one at a time and ``start_workflows`` in batches.

The floor sends the store's own enqueue statement (insert + ``NOTIFY``) with
the same row count per statement, on a pool of the same size, with ids made by
the same UUIDv7 function (time-ordered keys insert cheaper than random ones, so
the floor gets the same advantage).
"""

from __future__ import annotations

import time

import anyio
import asyncpg

from bench import app, sql
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.floor import enqueue_args
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "enqueue"
TITLE = "Enqueue throughput (workflows/s)"

TARGET_BATCH = 5000.0
WORKFLOW = "bench.app.three_steps"


async def _floor(pool: asyncpg.Pool, total: int, batch: int, callers: int) -> float:
    per_caller = total // callers

    async def caller() -> None:
        for _ in range(per_caller // batch):
            await pool.fetch(sql.ENQUEUE.sql, *enqueue_args(batch, WORKFLOW))

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(callers):
            group.start_soon(caller)
    return per_caller * callers / (time.perf_counter() - started)


async def _framework(client: DurableClient, total: int, batch: int, callers: int) -> float:
    per_caller = total // callers

    async def caller() -> None:
        if batch == 1:
            for i in range(per_caller):
                await client.start_workflow(app.three_steps, i)
        else:
            for _ in range(per_caller // batch):
                await client.start_workflows(app.three_steps, [(i,) for i in range(batch)])

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(callers):
            group.start_soon(caller)
    return per_caller * callers / (time.perf_counter() - started)


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(5, 1)
    cases = [
        ("one at a time (start_workflow), 1 caller", 1, 1, settings.pick(1500, 20)),
        ("one at a time (start_workflow), 8 callers", 1, 8, settings.pick(4000, 40)),
        ("batches of 100 (start_workflows)", 100, 1, settings.pick(20000, 200)),
        ("batches of 1000 (start_workflows)", 1000, 1, settings.pick(40000, 2000)),
    ]
    conn = await asyncpg.connect(settings.dsn)
    pool = await asyncpg.create_pool(settings.dsn, **sql.pool_options("durable_floor"))
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        for label, batch, callers, total in cases:
            rates: dict[str, list[float]] = {"floor": [], "framework": []}
            for trial in range(trials):
                order = ("floor", "framework") if trial % 2 == 0 else ("framework", "floor")
                for kind in order:
                    await reset(conn)
                    if kind == "floor":
                        rates[kind].append(await _floor(pool, total, batch, callers))
                    else:
                        rates[kind].append(await _framework(client, total, batch, callers))
            figure = Figure(
                name=label,
                unit="workflows/s",
                value=median(rates["framework"]),
                floor=median(rates["floor"]),
                trials=rates["framework"],
                floor_trials=rates["floor"],
                note=f"{total} workflows per trial",
            )
            if batch > 1:
                figure.target = f">= {TARGET_BATCH:,.0f}/s"
                figure.met = figure.value >= TARGET_BATCH
            result.add(figure)
    finally:
        await reset(conn)
        await store.close()
        await pool.close()
        await conn.close()
