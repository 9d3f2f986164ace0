"""New code for ``stuck.flow`` that blocks forever, shielded from cancellation, before its
history ends: ``durable replay-check --timeout`` must give up on it, not hang."""

from __future__ import annotations

import anyio

from durable_core import recv, workflow, workflow_step


@workflow_step(name="stuck.note")
async def note(what: str) -> str:
    return what


@workflow(name="stuck.flow")
async def flow() -> str:
    first = await note("first")
    with anyio.CancelScope(shield=True):
        await anyio.sleep_forever()
    return f"{first}, {await note('second')}, {await recv('finish')}"
