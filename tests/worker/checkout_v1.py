"""Version 1 of ``versioned.checkout``, run by the worker in the patch-marker test.

Steps are named explicitly: both versions live in different modules, and a step's
default name (``module.qualname``) would differ between them.
"""

from __future__ import annotations

from durable_core import sleep, workflow, workflow_step
from tests.worker.app import record


@workflow_step(name="checkout.charge")
async def charge(amount: int) -> int:
    await record("charge")
    return amount


@workflow_step(name="checkout.ship")
async def ship(total: int) -> str:
    await record("ship")
    return f"shipped, paid {total}"


@workflow(name="versioned.checkout", max_attempts=1)
async def checkout(amount: int, pause: float) -> str:
    total = await charge(amount)
    await sleep(pause)
    return await ship(total)
