"""The order workflow: wait for the payment webhook, then email the receipt once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path

from durable_core import recv, set_event, workflow, workflow_step

MAILDIR_ENV = "SHOP_MAILDIR"
PAYMENT_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Order:
    id: str
    """The ``Idempotency-Key`` the order was posted with, and its workflow id."""
    email: str
    items: tuple[str, ...]
    cents: int


@workflow_step
def email_receipt(order: Order, payment_id: str) -> str:
    """Send the receipt: here, a file in the outbox folder ``$SHOP_MAILDIR``.

    A mail API would take the order id as its idempotency key; the file name does
    that here, so a step retried after a crash does not send a second receipt.
    """
    message = EmailMessage()
    message["To"] = order.email
    message["From"] = "shop@example.com"
    message["Subject"] = f"Your receipt for order {order.id}"
    message.set_content(
        f"Paid {order.cents / 100:.2f} EUR for {', '.join(order.items)} (payment {payment_id})."
    )
    outbox = Path(os.environ.get(MAILDIR_ENV, "outbox"))
    outbox.mkdir(parents=True, exist_ok=True)
    path = outbox / f"receipt-{order.id}.eml"
    try:
        with path.open("xb") as out:
            out.write(message.as_bytes())
    except FileExistsError:
        pass  # sent before this retry
    return path.name


@workflow(name="shop.order")
async def order_flow(order: Order) -> str:
    """One order: wait up to an hour for its payment, then send the receipt."""
    await set_event("stage", "awaiting payment")
    payment = await recv("payment", timeout=PAYMENT_WINDOW)
    if payment is None or payment["status"] != "succeeded":
        await set_event("stage", "cancelled")
        return "cancelled"
    await email_receipt(order, payment["id"])
    await set_event("stage", "receipt sent")
    return "paid"
