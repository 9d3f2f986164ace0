"""Version 2 of ``versioned.checkout``: it charges tax, behind a patch marker."""

from __future__ import annotations

from durable_core import patched, sleep, workflow, workflow_step
from tests.worker.app import record


@workflow_step(name="checkout.charge")
async def charge(amount: int) -> int:
    await record("charge")
    return amount


@workflow_step(name="checkout.charge_with_tax")
async def charge_with_tax(amount: int) -> int:
    await record("charge_with_tax")
    return amount * 120 // 100


@workflow_step(name="checkout.ship")
async def ship(total: int) -> str:
    await record("ship")
    return f"shipped, paid {total}"


@workflow(name="versioned.checkout", max_attempts=1)
async def checkout(amount: int, pause: float) -> str:
    if await patched("tax"):
        total = await charge_with_tax(amount)
    else:
        total = await charge(amount)
    await sleep(pause)
    return await ship(total)
