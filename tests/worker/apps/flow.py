"""Debounced starts and keyed queues, run by worker processes (issue 22, flow control).

Run as a module it is a starter process:
``python -m tests.worker.apps.flow KEY FIRST COUNT`` debounces ``flow.debounced`` under
``KEY`` with the arguments FIRST, FIRST+1, ... (COUNT of them; 0: until killed), printing
``<run id> <argument>`` once each start has committed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys

import anyio

from durable_core import DebounceKey, DurableClient, Queue, open_store, workflow, workflow_step

WINDOW = 0.3
"""The debounce window of the starters (no worker runs while they start)."""

KEYED = Queue("keyed", key_concurrency=1)
"""One run at a time per concurrency key."""


@workflow(name="flow.debounced")
async def debounced(n: int) -> int:
    return n


@workflow_step
async def work(seconds: float) -> float:
    await anyio.sleep(seconds)
    return seconds


@workflow(name="flow.keyed", queue=KEYED)
async def keyed(seconds: float) -> float:
    return await work(seconds)


async def starter(key: str, first: int, count: int) -> None:
    store = await open_store(os.environ["DURABLE_DATABASE_URL"])
    client = DurableClient(store)
    try:
        numbers = itertools.count(first) if count == 0 else range(first, first + count)
        for n in numbers:
            handle = await client.start_workflow_debounced(DebounceKey(key, WINDOW), debounced, n)
            print(handle.id, n, flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(starter(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
