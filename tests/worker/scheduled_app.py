"""The workflow the schedule test's worker processes start on every tick."""

from __future__ import annotations

import anyio

from durable_core import WorkflowContext, workflow, workflow_step
from tests.worker.app import record


@workflow_step
async def tick() -> str:
    await record("tick")
    ctx = WorkflowContext.current()
    assert ctx is not None
    return ctx.worker_id


@workflow(name="scheduled.ticked", max_attempts=1)
async def ticked(label: str) -> str:
    return f"{label} run by {await tick()}"


@workflow(name="scheduled.ticked_twice", max_attempts=2)
async def ticked_twice(label: str) -> str:
    """As ``ticked``, with a budget that outlives one crash: the SIGKILL test's workflow. It
    lingers most of a second so that a kill is likely to interrupt one."""
    await anyio.sleep(0.8)
    return f"{label} run by {await tick()}"
