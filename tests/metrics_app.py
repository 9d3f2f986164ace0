"""Workflows with known outcomes, run by a real worker whose /metrics the tests scrape."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from durable_core import recv, workflow, workflow_step


@workflow_step
async def fetch(n: int) -> int:
    return n + 1


@workflow_step
async def store(n: int) -> int:
    return n * 2


@workflow
async def ok(n: int) -> int:
    """Two steps, succeeds."""
    return await store(await fetch(n))


@workflow_step
async def explode() -> None:
    raise ValueError("always")


@workflow(max_attempts=2)
async def broken() -> None:
    """Fails twice: a retry, then failed."""
    await explode()


@workflow
async def waits() -> str:
    """Waits for a message that never comes (no deadline)."""
    return str(await recv("go"))


@workflow_step
async def until_released() -> None:
    release = Path(os.environ["METRICS_RELEASE_FILE"])
    for _ in range(60_000):  # 20 minutes at most: the test releases it long before
        if release.exists():
            return
        await anyio.sleep(0.02)


@workflow
async def hold() -> None:
    """Runs until the test creates ``$METRICS_RELEASE_FILE``."""
    await until_released()


@workflow
async def unserved() -> None:
    """Started in a queue the worker does not serve: it stays pending."""
