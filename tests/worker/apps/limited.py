"""Workflows in queues with fleet-wide limits."""

from __future__ import annotations

import anyio

from durable_core import Queue, RateLimit, workflow, workflow_step

LIMITED = Queue("limited", concurrency=2)
PACED = Queue("paced", rate_limit=RateLimit(10, period=1.0))


@workflow_step
async def work(seconds: float) -> float:
    await anyio.sleep(seconds)
    return seconds


@workflow(name="limited.hold", queue=LIMITED)
async def hold(seconds: float) -> float:
    return await work(seconds)


@workflow(name="paced.tick", queue=PACED)
async def tick(n: int) -> int:
    return n


@workflow(name="plain.quick")
async def quick(n: int) -> int:
    return n
