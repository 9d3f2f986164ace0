"""The reports' workflows, in their own queue: another worker pool runs these."""

from __future__ import annotations

from durable_core import Queue, workflow, workflow_step

REPORTS = Queue("reports")


@workflow_step
async def tally(n: int) -> int:
    return n + 1000


@workflow(name="reports.build", queue=REPORTS)
async def build(n: int) -> int:
    return await tally(n)
