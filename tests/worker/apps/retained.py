"""Workflows under retention policies, for the worker test of issue 35.

Queue ``retained`` prunes its succeeded and failed workflows half a second after they
settle, checking every fifth of a second; ``retained.kept`` keeps its own for a day (a
workflow's policy wins over its queue's). ``retained.waits`` waits for a message and
``retained.parent`` for a message after its child settled: neither may be pruned, nor the
child, while they wait.
"""

from __future__ import annotations

from durable_core import Keep, Queue, Retention, recv, start_workflow, workflow, workflow_step

QUEUE = Queue(
    "retained",
    retention=Retention(succeeded=Keep(age=0.5), failed=Keep(age=0.5), every=0.2, batch=50),
)


@workflow_step
async def double(n: int) -> int:
    return n * 2


@workflow(name="retained.quick", queue=QUEUE)
async def quick(n: int) -> int:
    """Runs one step and ends."""
    return await double(n)


@workflow(name="retained.kept", queue=QUEUE, retention=Retention(succeeded="1d"))
async def kept(n: int) -> int:
    """Like ``quick``, kept for a day."""
    return await double(n)


@workflow(name="retained.waits", queue=QUEUE)
async def waits(n: int) -> int:
    """Waits for a message on ``go``."""
    got = await recv("go")
    return int(got) + n


@workflow(name="retained.child", queue=QUEUE)
async def child(n: int) -> int:
    """Ends at once."""
    return n + 1


@workflow(name="retained.parent", queue=QUEUE)
async def parent(n: int) -> int:
    """Starts a child, waits for a message, then reads the child's result."""
    handle = await start_workflow(child, n)
    await recv("go")
    result: int = await handle.output()
    return result
