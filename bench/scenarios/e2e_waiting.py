"""End-to-end throughput with and without 100,000 waiting workflows in the table.

The ``e2e`` trial (:func:`bench.scenarios.e2e.drain`: empty tables, a real
worker process, the whole backlog of three-step workflows enqueued at once,
throughput from server timestamps), run by the framework's worker only. Before
the worker starts, the tables get 100,000 settled workflows of history and
either no waiting workflows or 100,000 of them (:mod:`bench.waiting_rows`),
then ``VACUUM ANALYZE`` and ``CHECKPOINT``. The two kinds of trial alternate
(ABBA); the figure is the median with waiting rows, the floor the median
without.
"""

from __future__ import annotations

from functools import partial

import asyncpg

from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.scenarios.e2e import Trial, drain
from bench.waiting_rows import add_history, add_waiting, settle_tables
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "e2e_waiting"
TITLE = "End-to-end throughput with 100,000 workflows waiting (workflows/s)"

TARGET_RATIO = 0.95


async def _prepare(conn: asyncpg.Connection, *, history: int, waiting: int) -> None:
    await add_history(conn, history)
    await add_waiting(conn, waiting)
    await settle_tables(conn, checkpoint=True)


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(4, 1)
    waiting = settings.pick(100_000, 1_000)
    history = settings.pick(100_000, 2_000)
    configs = [
        ("1 worker, concurrency 8", 8, settings.pick(2500, 40)),
        ("1 worker, concurrency 32", 32, settings.pick(3000, 40)),
    ]
    if settings.smoke:
        configs = configs[:1]
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        for label, concurrency, count in configs:
            trial_results: dict[int, list[Trial]] = {0: [], waiting: []}
            for trial in range(trials):
                order = (0, waiting) if trial % 2 == 0 else (waiting, 0)
                for rows in order:
                    trial_results[rows].append(
                        await drain(
                            settings,
                            conn,
                            client,
                            kind="framework",
                            processes=1,
                            concurrency=concurrency,
                            count=count,
                            prepare=partial(_prepare, history=history, waiting=rows),
                        )
                    )
            with_, without = trial_results[waiting], trial_results[0]

            def field(trials: list[Trial], index: int) -> list[float]:
                return [trial[index] for trial in trials]

            figure = Figure(
                name=f"{label}, {waiting:,} waiting",
                unit="workflows/s",
                value=median(field(with_, 0)),
                floor=median(field(without, 0)),
                trials=field(with_, 0),
                floor_trials=field(without, 0),
                target=f">= {TARGET_RATIO:g}x without",
                note=(
                    f"floor = same trial, no waiting rows; {count} workflows per trial, "
                    f"{trials} trial(s) each, {history:,} settled rows beside; worker CPU "
                    f"{median(field(with_, 1)):.0f} us per workflow (without: "
                    f"{median(field(without, 1)):.0f} us)"
                ),
            )
            figure.met = (figure.ratio or 0) >= TARGET_RATIO
            result.add(figure)
            result.add(
                Figure(
                    name=f"{label}, {waiting:,} waiting: server CPU per workflow",
                    unit="us",
                    value=median(field(with_, 2)),
                    floor=median(field(without, 2)),
                    better="lower",
                    trials=field(with_, 2),
                    floor_trials=field(without, 2),
                    note=(
                        "CPU of the PostgreSQL processes serving the worker (/proc), same "
                        "trials; steadier than throughput on a shared machine"
                    ),
                )
            )
            result.details[label] = {
                "concurrency": concurrency,
                "count": count,
                "waiting": waiting,
                "history": history,
                "trials": {
                    "without": [trial._asdict() for trial in without],
                    "with": [trial._asdict() for trial in with_],
                },
            }
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
