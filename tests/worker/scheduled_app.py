"""The workflow the schedule test's worker processes start on every tick."""

from __future__ import annotations

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
