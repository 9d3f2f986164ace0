"""The workflows worker processes run behind PgBouncer (``tests/worker/test_pgbouncer.py``)."""

from __future__ import annotations

from durable_core import WorkflowContext, recv, sleep, workflow, workflow_step


@workflow_step
async def add_one(n: int) -> int:
    return n + 1


@workflow_step
async def worker_of() -> str:
    ctx = WorkflowContext.current()
    assert ctx is not None
    return ctx.worker_id


@workflow(name="pooler.steps")
async def steps(n: int) -> int:
    """Three steps."""
    return await add_one(await add_one(await add_one(n)))


@workflow(name="pooler.sleeper")
async def sleeper(seconds: float) -> str:
    """A durable sleep, then a step."""
    await sleep(seconds)
    return await worker_of()


@workflow(name="pooler.receiver")
async def receiver(topic: str) -> object:
    """One message on ``topic``, kept by a step."""
    value = await recv(topic)
    await worker_of()
    return value


@workflow(name="pooler.ticked", max_attempts=1)
async def ticked(label: str) -> str:
    """What a schedule starts."""
    return f"{label} by {await worker_of()}"
