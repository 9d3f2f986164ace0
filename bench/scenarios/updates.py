"""Update round trip: from ``client.update`` to its reply, against ``send`` plus an event.

One worker (concurrency 2, ``LISTEN`` on) runs two bodies side by side: one answers
``n`` updates (``recv_update("ask")`` then ``req.reply``), the other ``n`` messages
(``recv("ask")`` then ``set_event("reply-<i>", value)``), each suspending between
requests. The bench sends them alternately, one at a time: a sample is the seconds
from the call to the reply in hand, ``client.update(...)`` for the figure and
``client.send(...)`` then ``handle.get_event("reply-<i>")`` for the floor (how a user
builds request and response without updates). The caller of an update is woken by
``NOTIFY`` at the reply; ``get_event`` polls every 50 ms.
"""

from __future__ import annotations

import time

import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, percentile, reset
from bench.procs import fleet, wait_settled
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "updates"
TITLE = "Update round trip against send + set_event/get_event (ms)"


async def run(settings: Settings, result: ScenarioResult) -> None:
    n = settings.pick(200, 10)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        await reset(conn)
        with fleet(settings.url) as group:
            proc = group.start_worker(concurrency=2, poll_ms=100)
            await client.start_workflow(app.one_step)  # warm-up
            await wait_settled(conn, [proc], 1, timeout=60)
            updated = await client.start_workflow(app.answer_updates, n + 1)
            messaged = await client.start_workflow(app.answer_messages, n + 1)
            update_ms: list[float] = []
            message_ms: list[float] = []
            for i in range(n + 1):  # the first of each warms its path up
                began = time.perf_counter()
                reply = await client.update(updated.id, "ask", i, timeout=60)
                took = (time.perf_counter() - began) * 1000
                if reply != i:
                    raise RuntimeError(f"update {i} got {reply!r}")
                if i:
                    update_ms.append(took)
                began = time.perf_counter()
                await client.send(messaged.id, i, topic="ask")
                reply = await messaged.get_event(f"reply-{i}", timeout=60)
                took = (time.perf_counter() - began) * 1000
                if reply != i:
                    raise RuntimeError(f"message {i} got {reply!r}")
                if i:
                    message_ms.append(took)
            await wait_settled(conn, [proc], 3, timeout=120)
        for q in (50, 99):
            result.add(
                Figure(
                    name=f"update round trip p{q}, {n} sequential requests",
                    unit="ms",
                    value=percentile(update_ms, q),
                    floor=percentile(message_ms, q),
                    better="lower",
                    trials=update_ms if q == 50 else [],
                    floor_trials=message_ms if q == 50 else [],
                    note="floor = send, then get_event of the body's set_event reply",
                )
            )
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
