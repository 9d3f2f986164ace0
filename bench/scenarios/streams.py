"""Stream read throughput: values a caller reads per second while a body writes them.

Each trial starts a worker (concurrency 1) and the ``bench.app.stream_values`` body,
which writes ``n`` values to one key, each a transaction of its own with its call's
record, then closes it. The caller reads them with ``handle.read_stream`` (woken by
``NOTIFY``), from the start until the close; a trial's figure is ``n`` over the seconds
from the start to the last value read.

The floor, in the same run and interleaved trial by trial, reads the same rows of the
same body with bare asyncpg, polling ``workflow_streams`` in a loop with no pause at
all: what a reader that spends a core on polling gets. A ratio near 1 says the
``NOTIFY``-woken reader keeps up with the writer as that reader does, without polling.
"""

from __future__ import annotations

import time

import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.procs import fleet, wait_settled
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "streams"
TITLE = "Stream read throughput while a body writes (values/s)"

POLL = (
    "SELECT stream_offset, value FROM workflow_streams WHERE workflow_id = $1 "
    "AND key = 'values' AND stream_offset >= $2 ORDER BY stream_offset"
)


async def _trial(
    settings: Settings, conn: asyncpg.Connection, client: DurableClient, n: int, handle_read: bool
) -> float:
    """Values per second one reader got while the body wrote ``n``."""
    await reset(conn)
    with fleet(settings.url) as group:
        proc = group.start_worker(concurrency=1, poll_ms=100)
        await client.start_workflow(app.one_step)  # warm-up
        await wait_settled(conn, [proc], 1, timeout=60)
        began = time.perf_counter()
        handle = await client.start_workflow(app.stream_values, n)
        got: list[int] = []
        if handle_read:
            async for value in handle.read_stream("values"):
                got.append(value)
        else:
            done = False
            while not done:
                for row in await conn.fetch(POLL, handle.id, len(got)):
                    if row["value"] is None:
                        done = True
                        break
                    got.append(int(row["value"]))
        took = time.perf_counter() - began
        await wait_settled(conn, [proc], 2, timeout=60)
    if got != list(range(n)):
        raise RuntimeError(f"the reader got {len(got)} values, not 0..{n - 1} in order")
    return n / took


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(3, 1)
    n = settings.pick(2000, 50)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        series: dict[bool, list[float]] = {True: [], False: []}
        for trial in range(trials):
            for handle_read in (True, False) if trial % 2 == 0 else (False, True):
                series[handle_read].append(await _trial(settings, conn, client, n, handle_read))
        result.add(
            Figure(
                name=f"read_stream of {n} values, one writer body",
                unit="values/s",
                value=median(series[True]),
                floor=median(series[False]),
                better="higher",
                trials=series[True],
                floor_trials=series[False],
                note="floor = the same rows read by a bare-asyncpg loop polling with no pause",
            )
        )
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
