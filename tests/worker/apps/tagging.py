"""A workflow that sets searchable attributes, for the crash test of issue 22.

A worker started with ``TAG_HOLD=1`` blocks in the ``hold`` step, after the first
``set_attributes``, so the test can SIGKILL it there; a worker without it runs through.
"""

from __future__ import annotations

import os

import anyio

from durable_core import set_attributes, workflow, workflow_step


@workflow_step
async def hold(order: str) -> str:
    """Blocks for an hour in a worker started with TAG_HOLD=1."""
    if os.environ.get("TAG_HOLD"):
        await anyio.sleep(3600)
    return order


@workflow(name="tagging.order")
async def tagged_order(order: str, amount: float) -> str:
    """Tags itself with its customer and amount, holds, then tags its stage."""
    await set_attributes(customer="acme", amount=amount)
    await hold(order)
    await set_attributes(stage="shipped")
    return order
