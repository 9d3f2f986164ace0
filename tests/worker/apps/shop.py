"""The shop's workflows: one worker pool runs these, and only these."""

from __future__ import annotations

from durable_core import workflow, workflow_step


@workflow_step
async def charge(n: int) -> int:
    return n * 10


@workflow(name="shop.checkout")
async def checkout(n: int) -> int:
    return await charge(n)
