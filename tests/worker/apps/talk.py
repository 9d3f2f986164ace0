"""Workflows that write streams and answer updates, for the crash tests of issue 22.

A worker started with ``TALK_HOLD=1`` blocks in the ``hold`` step, so the test can
SIGKILL it there; a worker without it runs straight through.
"""

from __future__ import annotations

import os

import anyio

from durable_core import close_stream, recv_update, workflow, workflow_step, write_stream


@workflow_step
async def hold(at: int) -> int:
    """Blocks for an hour in a worker started with TALK_HOLD=1."""
    if os.environ.get("TALK_HOLD"):
        await anyio.sleep(3600)
    return at


@workflow(name="talk.ticker")
async def ticker(n: int, hold_at: int) -> int:
    """Writes 0..n-1 to the stream ``ticks`` (holding after ``hold_at``), then closes it."""
    for i in range(n):
        await write_stream("ticks", i)
        if i == hold_at:
            await hold(i)
    await close_stream("ticks")
    return n


@workflow_step
async def apply_approval(amount: int) -> int:
    """What handling the update does (a step: it runs once, its result kept)."""
    return amount * 2


@workflow(name="talk.approver")
async def approver() -> int:
    """Takes one ``approve`` update, handles it, holds, then replies."""
    req = await recv_update("approve")
    assert req is not None
    doubled = await apply_approval(req.payload["amount"])
    await hold(doubled)
    await req.reply({"doubled": doubled})
    return doubled
