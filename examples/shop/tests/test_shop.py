"""The shop over HTTP: in-process on SQLite with ``workflow_runner`` as the worker, and
with a real worker process on PostgreSQL."""

from __future__ import annotations

import uuid
from email import message_from_bytes
from pathlib import Path

import anyio
import httpx
import pytest

from durable_core import DurableClient, Store, WorkflowStatus
from durable_core.runtime.worker_process import WorkerProcess
from durable_core.testing import WorkflowRunner

from .conftest import shop_client

ORDER = {"email": "ann@example.com", "items": ["tea", "cups"], "cents": 2_400}


def paid(order_id: str, event_id: str = "evt_1") -> dict[str, str]:
    return {"id": event_id, "order_id": order_id, "status": "succeeded"}


async def place(shop: httpx.AsyncClient, key: str, body: dict[str, object] = ORDER) -> str:
    response = await shop.post("/orders", json=body, headers={"Idempotency-Key": key})
    assert response.status_code == 202, response.text
    order_id: str = response.json()["order"]
    return order_id


def receipts(maildir: Path) -> list[str]:
    return sorted(path.name for path in maildir.glob("*.eml")) if maildir.exists() else []


@pytest.mark.anyio
async def test_an_order_posted_three_times_is_placed_paid_and_mailed_once(
    shop: httpx.AsyncClient,
    durable_sqlite_store: Store,
    workflow_runner: WorkflowRunner,
    maildir: Path,
) -> None:
    key = str(uuid.uuid4())
    assert [await place(shop, key) for _ in range(3)] == [key, key, key]
    assert len(await durable_sqlite_store.list_workflows()) == 1

    assert await workflow_runner.run_once(key) is WorkflowStatus.WAITING
    order = (await shop.get(f"/orders/{key}")).json()
    assert (order["status"], order["stage"]) == ("waiting", "awaiting payment")

    for _ in range(2):  # the provider redelivers the same event
        assert (await shop.post("/webhooks/payment", json=paid(key))).status_code == 200
    assert await workflow_runner.run_until_complete(key) is WorkflowStatus.SUCCEEDED
    assert (await shop.get(f"/orders/{key}")).json() == {
        "order": key,
        "status": "succeeded",
        "stage": "receipt sent",
        "result": "paid",
    }
    assert receipts(maildir) == [f"receipt-{key}.eml"]
    mail = message_from_bytes((maildir / f"receipt-{key}.eml").read_bytes())
    assert mail["To"] == "ann@example.com"
    assert "Paid 24.00 EUR for tea, cups (payment evt_1)" in mail.get_payload()

    assert await place(shop, key) == key  # a retry after the fact changes nothing
    assert len(await durable_sqlite_store.list_workflows()) == 1
    assert receipts(maildir) == [f"receipt-{key}.eml"]


@pytest.mark.anyio
async def test_another_order_under_a_used_key_is_refused(
    shop: httpx.AsyncClient, workflow_runner: WorkflowRunner, maildir: Path
) -> None:
    key = str(uuid.uuid4())
    await place(shop, key)
    response = await shop.post(
        "/orders", json={**ORDER, "cents": 1}, headers={"Idempotency-Key": key}
    )
    assert response.status_code == 422
    assert response.json() == {"detail": "this Idempotency-Key was used for another order"}
    assert (await shop.post("/webhooks/payment", json=paid(key))).status_code == 200
    await workflow_runner.run_until_complete(key)
    receipt = (maildir / f"receipt-{key}.eml").read_text()
    assert "Paid 24.00 EUR" in receipt  # the first order's amount


@pytest.mark.anyio
async def test_an_order_nobody_pays_is_cancelled_after_an_hour_without_a_receipt(
    shop: httpx.AsyncClient, workflow_runner: WorkflowRunner, maildir: Path
) -> None:
    key = await place(shop, str(uuid.uuid4()))
    assert await workflow_runner.run_until_complete(key) is WorkflowStatus.SUCCEEDED
    order = (await shop.get(f"/orders/{key}")).json()
    assert (order["result"], order["stage"]) == ("cancelled", "cancelled")
    assert workflow_runner.clock.offset.total_seconds() == pytest.approx(3600, abs=5)  # skipped
    assert receipts(maildir) == []


@pytest.mark.anyio
async def test_a_failed_payment_cancels_the_order(
    shop: httpx.AsyncClient, workflow_runner: WorkflowRunner, maildir: Path
) -> None:
    key = await place(shop, str(uuid.uuid4()))
    failed = {**paid(key), "status": "failed"}
    assert (await shop.post("/webhooks/payment", json=failed)).status_code == 200
    await workflow_runner.run_until_complete(key)
    assert (await shop.get(f"/orders/{key}")).json()["result"] == "cancelled"
    assert receipts(maildir) == []


@pytest.mark.anyio
async def test_requests_the_shop_cannot_take(shop: httpx.AsyncClient) -> None:
    assert (await shop.post("/webhooks/payment", json=paid("nope"))).status_code == 404
    assert (await shop.get("/orders/nope")).status_code == 404
    assert (await shop.post("/orders", json=ORDER)).status_code == 422  # no Idempotency-Key
    too_long = {"Idempotency-Key": "k" * 37}
    assert (await shop.post("/orders", json=ORDER, headers=too_long)).status_code == 422
    no_items = {**ORDER, "items": []}
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert (await shop.post("/orders", json=no_items, headers=key)).status_code == 422


@pytest.mark.anyio
async def test_with_a_real_worker_concurrent_posts_make_one_order_and_one_receipt(
    durable_postgres_store: Store, durable_worker: WorkerProcess, maildir: Path
) -> None:
    key = str(uuid.uuid4())
    async with shop_client(durable_postgres_store) as shop:
        placed: list[str] = []

        async def post() -> None:
            placed.append(await place(shop, key))

        async with anyio.create_task_group() as group:
            for _ in range(5):  # a client retrying while the first POST is in flight
                group.start_soon(post)
        assert placed == [key] * 5
        assert len(await durable_postgres_store.list_workflows()) == 1

        handle = DurableClient(durable_postgres_store).handle(key)
        assert await handle.get_event("stage", timeout=20) == "awaiting payment"  # at its recv
        for _ in range(2):
            assert (await shop.post("/webhooks/payment", json=paid(key))).status_code == 200
        assert await handle.wait_with_timeout(20) is WorkflowStatus.SUCCEEDED
        order = (await shop.get(f"/orders/{key}")).json()
        assert (order["status"], order["result"]) == ("succeeded", "paid")
        assert await place(shop, key) == key
    assert len(await durable_postgres_store.list_workflows()) == 1
    assert receipts(maildir) == [f"receipt-{key}.eml"]
    assert (await handle.info()).attempts == 1, (await handle.attempts(), durable_worker.log())
