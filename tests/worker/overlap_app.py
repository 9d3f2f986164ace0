"""The workflow of the overlap crash test: it waits for "go", so its run is the latest
while the schedule keeps a buffered tick."""

from __future__ import annotations

import durable_core
from durable_core import workflow, workflow_step
from tests.worker.app import record


@workflow_step
async def held_step() -> str:
    await record("held")
    return "ran"


@workflow(name="overlap.held", max_attempts=1)
async def held() -> str:
    got: str = await durable_core.recv("go")
    return f"{got} {await held_step()}"
