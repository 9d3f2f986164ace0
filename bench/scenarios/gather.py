"""Concurrency inside a body: 100 children or 100 I/O steps, gathered or one at a time.

One worker (concurrency 1 and 8) runs a parent that starts 100 one-step children with
``start_workflows`` and joins them. The figure is the seconds from the parent's
creation to its completion (server timestamps) when it joins them with
``asyncio.gather``; the floor is the same parent joining them one after another (the
only way before a body could wait on several things), alternated in the same run.
Both suspend while children run and wake as children settle; gather waits on all the
children at once (``waiting_for = any:<n>``), the loop on the next one.

The second pair is a body calling 100 steps that each wait 20 ms on I/O (a remote
call), gathered against one after another, in one worker at concurrency 8: the
seconds from the workflow's creation to its completion.
"""

from __future__ import annotations

import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.procs import fleet, wait_settled
from durable_core import DurableClient, Workflow
from durable_postgres import PostgresStore

IO_SECONDS = 0.02

NAME = "gather"
TITLE = "Gather in a body: 100 children, or 100 I/O steps, against one at a time (seconds)"


async def _seconds(
    settings: Settings,
    conn: asyncpg.Connection,
    client: DurableClient,
    flow: Workflow[..., int],
    args: tuple[object, ...],
    *,
    rows: int,
    concurrency: int,
    expected: int,
) -> float:
    """Seconds from the creation of ``flow(*args)`` to its completion, on a fresh worker
    (``rows``: the workflows it settles, itself included)."""
    await reset(conn)
    with fleet(settings.url) as group:
        proc = group.start_worker(concurrency=concurrency, poll_ms=100)
        await client.start_workflow(app.one_step)  # warm-up
        await wait_settled(conn, [proc], 1, timeout=60)
        handle = await client.start_workflow(flow, *args)
        await wait_settled(conn, [proc], rows + 1, timeout=300)
    row = await conn.fetchrow(
        "SELECT extract(epoch FROM completed_at - created_at) AS took, output"
        " FROM workflows WHERE id = $1",
        handle.id,
    )
    if int(row["output"]) != expected:
        raise RuntimeError(f"workflow {handle.id} returned {row['output']}, not {expected}")
    return float(row["took"])


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(3, 1)
    children = settings.pick(100, 5)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        # label, (concurrent, in-turn) workflows, their args, rows, concurrency, expected
        pairs: list[
            tuple[
                str,
                tuple[Workflow[..., int], Workflow[..., int]],
                tuple[object, ...],
                int,
                int,
                int,
            ]
        ] = [
            (
                f"{children} children, worker concurrency {concurrency}",
                (app.gather_children, app.join_children_in_turn),
                (children,),
                children + 1,
                concurrency,
                sum(i + 1 for i in range(children)),
            )
            for concurrency in (1, 8)
        ]
        pairs.append(
            (
                f"{children} steps waiting {IO_SECONDS * 1000:g} ms on I/O, concurrency 8",
                (app.gather_io_steps, app.io_steps_in_turn),
                (children, IO_SECONDS),
                1,
                8,
                sum(range(children)),
            )
        )
        for name, flows, args, rows, concurrency, expected in pairs:
            series: dict[bool, list[float]] = {True: [], False: []}
            for trial in range(trials):
                for gather in (True, False) if trial % 2 == 0 else (False, True):
                    series[gather].append(
                        await _seconds(
                            settings,
                            conn,
                            client,
                            flows[0] if gather else flows[1],
                            args,
                            rows=rows,
                            concurrency=concurrency,
                            expected=expected,
                        )
                    )
            result.add(
                Figure(
                    name=name,
                    unit="s",
                    value=median(series[True]),
                    floor=median(series[False]),
                    better="lower",
                    trials=series[True],
                    floor_trials=series[False],
                    note="floor = the same body awaiting them one after another",
                )
            )
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
