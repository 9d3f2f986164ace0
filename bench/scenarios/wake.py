"""Wake-up latency: from ``send`` to the waiting workflow's next step, on an idle worker.

Each block starts a worker (default concurrency and poll interval, ``LISTEN``
on) and has it run ``bench.app.wait_for_go`` once per sample: each suspends in
``recv("go")`` and leaves its row ``waiting``. Then, one at a time, with the
worker idle (a random 5-30 ms after the previous workflow settled), the bench
sends ``"go"`` to the next one and waits until it has settled. A sample is the
server's ``started_at`` of the step after the ``recv`` minus the ``run_at`` the
send's wake wrote: ``now()`` of the send's transaction, i.e. when it began (a
claim does not change ``run_at``), so no client clock is involved.

The floor is a fresh start on the same worker, interleaved with the sends:
``start_workflow(one_step)`` while idle, its first step's ``started_at`` minus
its ``created_at`` (the ``latency`` scenario's measure). The ratio is what
waking a suspended workflow costs beyond starting a new one: the send is a
transaction of four statements (lock the row, check the message id, insert the
message, wake the row with ``NOTIFY``) where an enqueue is one, and the resumed
body replays to the ``recv``, which takes the message in a transaction of its
own before the next step starts. A bare-asyncpg ``NOTIFY`` to ``LISTEN``
delivery is timed beside it for scale.
"""

from __future__ import annotations

import random
import time
from typing import Any

import anyio
import asyncpg

from bench import app
from bench.common import Figure, ScenarioResult, Settings, median, percentile, reset
from bench.procs import Proc, fleet, wait_settled
from durable_core import DurableClient
from durable_core.runtime.config import WorkflowConfig
from durable_postgres import PostgresStore

NAME = "wake"
TITLE = "Wake-up latency: send to the waiting workflow's next step, idle worker (ms)"

CONCURRENCY = int(WorkflowConfig().concurrency)
POLL_MS = int(WorkflowConfig().poll_interval_ms)
TARGET_P50_MS = 10.0
TARGET_P99_MS = 50.0
GAP = (0.005, 0.03)
FLOOR_CHANNEL = "bench_wake_floor"


async def _block(
    settings: Settings, conn: asyncpg.Connection, client: DurableClient, samples: int
) -> dict[str, Any]:
    """One worker: ``samples`` wake-ups and ``samples`` fresh starts, interleaved."""
    await reset(conn)
    sent: list[tuple[str, float, float]] = []  # (workflow id, wall clock before, call seconds)
    fresh: list[str] = []
    with fleet(settings.url) as group:
        proc: Proc = group.start_worker(concurrency=CONCURRENCY, poll_ms=POLL_MS)
        # Warm-up: one wake-up and one fresh start run every code path first.
        waiting = await client.start_workflows(app.wait_for_go, [()] * (samples + 1))
        await wait_settled(conn, [proc], samples + 1, timeout=60, status="waiting")
        await client.send(waiting[0].id, "warm-up", topic="go")
        await client.start_workflow(app.one_step)
        await wait_settled(conn, [proc], 2, timeout=60)
        done = 2
        for i, handle in enumerate(waiting[1:]):
            for kind in ("wake", "fresh") if i % 2 == 0 else ("fresh", "wake"):
                await anyio.sleep(random.uniform(*GAP))
                if kind == "wake":
                    wall = time.time()
                    started = time.perf_counter()
                    await client.send(handle.id, i, topic="go")
                    sent.append((handle.id, wall, time.perf_counter() - started))
                else:
                    fresh.append((await client.start_workflow(app.one_step)).id)
                done += 1
                await wait_settled(conn, [proc], done, timeout=10 + 2 * POLL_MS / 1000)
    wake_rows = await conn.fetch(
        "SELECT w.id, extract(epoch FROM s1.started_at - w.run_at) * 1000 AS total,"
        " extract(epoch FROM s0.completed_at - w.run_at) * 1000 AS resumed,"
        " extract(epoch FROM s1.started_at) AS next_step_epoch, w.attempts"
        " FROM workflows w"
        " JOIN workflow_steps s0 ON s0.workflow_id = w.id AND s0.step_index = 0"
        " JOIN workflow_steps s1 ON s1.workflow_id = w.id AND s1.step_index = 1"
        " WHERE w.id = ANY($1::text[])",
        [item[0] for item in sent],
    )
    if len(wake_rows) != len(sent):
        raise RuntimeError(f"{len(wake_rows)} of {len(sent)} woken workflows ran their next step")
    by_id = {row["id"]: row for row in wake_rows}
    wake_ms, resumed_ms, client_ms, send_ms = [], [], [], []
    for workflow_id, wall, call in sent:
        row = by_id[workflow_id]
        if row["attempts"] != 1 or row["resumed"] < 0:
            raise RuntimeError(f"workflow {workflow_id} did not wake once from its send: {row}")
        wake_ms.append(float(row["total"]))
        resumed_ms.append(float(row["resumed"]))
        client_ms.append((float(row["next_step_epoch"]) - wall) * 1000)
        send_ms.append(call * 1000)
    fresh_rows = await conn.fetch(
        "SELECT extract(epoch FROM s.started_at - w.created_at) * 1000 FROM workflows w "
        "JOIN workflow_steps s ON s.workflow_id = w.id AND s.step_index = 0 "
        "WHERE w.id = ANY($1::text[])",
        fresh,
    )
    return {
        "wake_ms": wake_ms,
        "fresh_ms": [float(row[0]) for row in fresh_rows],
        "resumed_ms": resumed_ms,
        "client_clock_ms": client_ms,
        "send_call_ms": send_ms,
    }


async def _notify_round_trips(settings: Settings, samples: int) -> list[float]:
    """Milliseconds from a bare ``SELECT pg_notify(...)`` to its delivery on a listener."""
    listener = await asyncpg.connect(settings.dsn)
    sender = await asyncpg.connect(settings.dsn)
    arrived = [anyio.Event()]
    try:
        await listener.add_listener(FLOOR_CHANNEL, lambda *_: arrived[0].set())
        notify = await sender.prepare(f"SELECT pg_notify('{FLOOR_CHANNEL}', '')")
        times = []
        for _ in range(samples + 5):
            arrived[0] = anyio.Event()
            started = time.perf_counter()
            await notify.fetchval()
            await arrived[0].wait()
            times.append((time.perf_counter() - started) * 1000)
            await anyio.sleep(random.uniform(*GAP))
        return times[5:]
    finally:
        await listener.close()
        await sender.close()


async def run(settings: Settings, result: ScenarioResult) -> None:
    blocks = settings.pick(2, 1)
    per_block = settings.pick(100, 5)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    series: dict[str, list[float]] = {}
    try:
        for _ in range(blocks):
            for key, values in (await _block(settings, conn, client, per_block)).items():
                series.setdefault(key, []).extend(values)
        notify_ms = await _notify_round_trips(settings, settings.pick(200, 5))
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
    wake, fresh = series["wake_ms"], series["fresh_ms"]
    after_recv = [a - b for a, b in zip(wake, series["resumed_ms"], strict=True)]
    for q, target in ((50, TARGET_P50_MS), (99, TARGET_P99_MS)):
        figure = Figure(
            name=f"send to next step, p{q}",
            unit="ms",
            value=percentile(wake, q),
            floor=percentile(fresh, q),
            better="lower",
            target=f"< {target:g} ms",
            note=(
                f"floor = fresh start (enqueue to first step) on the same idle worker, "
                f"interleaved; {len(wake)} samples each; bare NOTIFY delivery "
                f"p{q} {percentile(notify_ms, q):.2f} ms"
            ),
        )
        figure.met = figure.value < target
        result.add(figure)
    result.details.update(series)
    result.details["notify_ms"] = notify_ms
    result.details["medians_ms"] = {
        "send_to_next_step": median(wake),
        "fresh_start": median(fresh),
        "send_call_client": median(series["send_call_ms"]),
        "send_began_to_recv_step": median(series["resumed_ms"]),
        "recv_step_to_next_step": median(after_recv),
        "send_call_to_next_step_client_clock": median(series["client_clock_ms"]),
        "bare_notify_delivery": median(notify_ms),
    }
