"""Version 1 of ``rename.checkout``: its charge step returns a ``Receipt``; its wait step
hangs, so the test kills the worker there, mid-workflow."""

from __future__ import annotations

import dataclasses

import anyio

from durable_core import workflow, workflow_step
from tests.worker.app import record


@dataclasses.dataclass(frozen=True)
class Receipt:
    order: str
    cents: int


@workflow_step(name="rename.charge")
async def charge(order: str, cents: int) -> Receipt:
    await record("charge")
    return Receipt(order, cents)


@workflow_step(name="rename.label")
async def label(receipt: Receipt) -> str:
    await record("label")
    return f"label for {receipt.order}"


@workflow_step(name="rename.wait")
async def wait() -> None:
    await record("wait")
    await anyio.sleep(3600)  # killed here


@workflow(name="rename.checkout", max_attempts=3)
async def checkout(order: str, cents: int) -> str:
    receipt = await charge(order, cents)
    text = await label(receipt)
    await wait()
    return f"{type(receipt).__name__} {receipt.order} {receipt.cents}: {text}"
