"""Workflows whose effect a paused worker writes late, for the fencing tests of issue 34.

Each body runs a step, then holds in the body (outside any step, once the step's end has
committed: the worker owes no write) on its first attempt only, until the file
``<FENCE_DIR>/<workflow id>.release`` exists; then it writes one effect marked with its
attempt number. The test SIGSTOPs the first worker while it holds, lets a second worker
take the workflow over and finish it, then releases and SIGCONTs the first: the first
worker's effect must not land.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from durable_core import (
    WorkflowContext,
    recv_update,
    send,
    set_attributes,
    set_event,
    start_workflow_with_id,
    workflow,
    workflow_step,
    write_stream,
)


@workflow_step
async def before(n: int) -> int:
    """The step before the hold (its end commits before the body holds)."""
    return n


async def hold() -> int:
    """This attempt's number; on attempt 1, first hold until the test releases it (the
    ``.held`` file tells the test it holds)."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        folder = Path(os.environ["FENCE_DIR"])
        (folder / f"{ctx.workflow_id}.held").touch()
        while not (folder / f"{ctx.workflow_id}.release").exists():  # noqa: ASYNC110 (a file)
            await anyio.sleep(0.02)
    return ctx.attempt


@workflow(name="fence.target")
async def target() -> None:
    """What the sends go to (started far in the future: it never runs in a test)."""


@workflow(name="fence.child")
async def child() -> int:
    """A child started by ``starts``."""
    return 1


@workflow(name="fence.sends")
async def sends(to: str) -> int:
    await before(1)
    attempt = await hold()
    await send(to, attempt, topic="t", idempotency_key=f"fence-{attempt}")
    return attempt


@workflow(name="fence.starts")
async def starts() -> int:
    await before(1)
    attempt = await hold()
    ctx = WorkflowContext.current()
    assert ctx is not None
    await start_workflow_with_id(f"{ctx.workflow_id}-child-{attempt}", child)
    return attempt


@workflow(name="fence.publishes")
async def publishes() -> int:
    await before(1)
    attempt = await hold()
    await set_event("owner", attempt)
    return attempt


@workflow(name="fence.streams")
async def streams() -> int:
    await before(1)
    attempt = await hold()
    await write_stream("owner", attempt)
    return attempt


@workflow(name="fence.tags")
async def tags() -> int:
    await before(1)
    attempt = await hold()
    await set_attributes(owner=attempt)
    return attempt


@workflow(name="fence.replies")
async def replies() -> int:
    request = await recv_update("ask")
    assert request is not None
    await before(1)
    attempt = await hold()
    await request.reply(attempt)
    return attempt
