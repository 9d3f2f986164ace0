"""Version 2 of ``rename.checkout``: ``Receipt`` is renamed ``Invoice`` (and moved to this
module); it declares a stable name and the old name, which version 1's rows hold, as an alias."""

from __future__ import annotations

import dataclasses

from durable_core import durable_type, workflow, workflow_step
from tests.worker.app import record


@durable_type("billing.Invoice", aliases=["tests.worker.rename_v1:Receipt"])
@dataclasses.dataclass(frozen=True)
class Invoice:
    order: str
    cents: int


@workflow_step(name="rename.charge")
async def charge(order: str, cents: int) -> Invoice:
    await record("charge")
    return Invoice(order, cents)


@workflow_step(name="rename.label")
async def label(receipt: Invoice) -> str:
    await record("label")
    return f"label for {receipt.order}"


@workflow_step(name="rename.wait")
async def wait() -> None:
    await record("wait")


@workflow(name="rename.checkout", max_attempts=3)
async def checkout(order: str, cents: int) -> str:
    receipt = await charge(order, cents)
    assert type(receipt) is Invoice, type(receipt)
    text = await label(receipt)
    await wait()
    return f"{type(receipt).__name__} {receipt.order} {receipt.cents}: {text}"
