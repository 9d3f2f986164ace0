"""The shop's HTTP API: place an order, read it, take the payment provider's webhook.

``create_app()`` opens ``$DURABLE_DATABASE_URL`` at start-up (``uvicorn --factory
examples.shop.app:create_app``); tests pass their own store with ``create_app(store)``.
A worker runs the workflows: ``durable worker --app examples.shop.workflows``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from pydantic import BaseModel, Field

from durable_core import (
    DurableClient,
    Store,
    WorkflowConflictError,
    WorkflowNotFoundError,
    open_store,
)

from .workflows import Order, order_flow


class OrderIn(BaseModel):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    items: list[str] = Field(min_length=1)
    cents: int = Field(gt=0)


class PaymentEvent(BaseModel):
    """What the payment provider posts; it retries, so one ``id`` may come many times."""

    id: str = Field(max_length=64)
    order_id: str
    status: Literal["succeeded", "failed"]


def durable(request: Request) -> DurableClient:
    client: DurableClient = request.app.state.durable
    return client


Durable = Annotated[DurableClient, Depends(durable)]


@asynccontextmanager
async def _open_store(app: FastAPI) -> AsyncIterator[None]:
    store = await open_store()  # $DURABLE_DATABASE_URL
    app.state.durable = DurableClient(store)
    try:
        yield
    finally:
        await store.close()


def create_app(store: Store | None = None) -> FastAPI:
    """The app, on ``store`` or else on the store of ``$DURABLE_DATABASE_URL``."""
    app = FastAPI(title="shop", lifespan=None if store is not None else _open_store)
    if store is not None:
        app.state.durable = DurableClient(store)

    @app.post("/orders", status_code=202)
    async def place_order(
        body: OrderIn,
        durable: Durable,
        idempotency_key: Annotated[str, Header(min_length=1, max_length=36)],
    ) -> dict[str, str]:
        """Start the order once per ``Idempotency-Key``: a retried POST finds it again."""
        order = Order(idempotency_key, body.email, tuple(body.items), body.cents)
        try:
            handle = await durable.start_workflow_with_id(order.id, order_flow, order)
        except WorkflowConflictError:
            raise HTTPException(422, "this Idempotency-Key was used for another order") from None
        return {"order": handle.id}

    @app.get("/orders/{order_id}")
    async def get_order(order_id: str, durable: Durable) -> dict[str, Any]:
        handle = durable.handle(order_id)
        try:
            status = await handle.status()
        except WorkflowNotFoundError:
            raise HTTPException(404, f"no order {order_id}") from None
        stage = await handle.get_event("stage", timeout=0)
        result = await handle.output() if status.value == "succeeded" else None
        return {"order": order_id, "status": status.value, "stage": stage, "result": result}

    @app.post("/webhooks/payment")
    async def payment_webhook(event: PaymentEvent, durable: Durable) -> dict[str, bool]:
        """Hand the event to its order; a redelivered event (same ``id``) sends nothing."""
        try:
            await durable.send(
                event.order_id, event.model_dump(), topic="payment", idempotency_key=event.id
            )
        except WorkflowNotFoundError:
            raise HTTPException(404, f"no order {event.order_id}") from None
        return {"received": True}

    return app
