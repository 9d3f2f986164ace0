"""The claim loop every floor worker shares: free slots filled by one claim loop, ``LISTEN``
for new rows, the poll interval as a fallback, a clean stop on SIGTERM; and the command
line of a floor worker process."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import asyncpg

from bench import sql


def connect_options(application_name: str) -> dict[str, object]:
    """Server settings of a floor's connections (the store's, under its own name)."""
    return {"server_settings": {**sql.SERVER_SETTINGS, "application_name": application_name}}


RunOne = Callable[[asyncpg.Record, str], Awaitable[None]]
"""Runs one claimed workflow: the claimed row (:data:`CLAIM`'s columns) and the worker id."""


async def serve(
    dsn: str,
    application_name: str,
    *,
    concurrency: int,
    poll_ms: float,
    claim: Callable[[str, int], Awaitable[list[asyncpg.Record]]],
    run_one: RunOne,
    listen: bool = True,
) -> None:
    """Claim and run rows until SIGTERM: one claim loop filling free slots, ``LISTEN`` for
    new rows (the framework's enqueue notifies; unless not ``listen``), the poll interval
    as a fallback."""
    stopping = asyncio.Event()
    notified = asyncio.Event()
    slot_free = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    listener = None
    if listen:
        listener = await asyncpg.connect(dsn, **connect_options(application_name))
        await listener.add_listener(sql.CHANNEL, lambda *_: notified.set())
    worker_id = f"{application_name}:{os.getpid()}"
    in_flight = 0
    tasks: set[asyncio.Task[None]] = set()

    async def guarded(row: asyncpg.Record) -> None:
        nonlocal in_flight
        try:
            await run_one(row, worker_id)
        finally:
            in_flight -= 1
            slot_free.set()

    async def wait_any(*events: asyncio.Event, timeout: float) -> None:
        waiters = [asyncio.ensure_future(event.wait()) for event in events]
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    while not stopping.is_set():
        free = concurrency - in_flight
        if free <= 0:
            slot_free.clear()
            await wait_any(slot_free, stopping, timeout=60)
            continue
        notified.clear()
        rows = await claim(worker_id, free)
        for row in rows:
            in_flight += 1
            task = asyncio.create_task(guarded(row))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if len(rows) < free:
            await wait_any(notified, stopping, timeout=poll_ms / 1000)
    if tasks:
        await asyncio.gather(*tasks)
    if listener is not None:
        await listener.close()


def floor_main(prog: str, run_worker: Callable[..., Coroutine[Any, Any, None]]) -> None:
    """``python -m <prog>``: a floor worker process running ``run_worker`` with the command
    line's ``--url``, ``--concurrency``, ``--steps`` and ``--poll-ms``."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}")
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--poll-ms", type=float, default=1000)
    args = parser.parse_args()
    asyncio.run(
        run_worker(args.url, concurrency=args.concurrency, steps=args.steps, poll_ms=args.poll_ms)
    )
