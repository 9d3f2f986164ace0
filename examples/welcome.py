"""The quick-start workflow: fetch a user, then send them a welcome mail."""

from __future__ import annotations

from dataclasses import dataclass

from durable_core import workflow, workflow_step


@dataclass(frozen=True)
class Welcome:
    user: str
    message: str


@workflow_step
async def fetch_user(user_id: int) -> str:
    return f"user:{user_id}"


@workflow_step
async def send_welcome_email(user: str) -> str:
    # A real step would call a mail API with an idempotency key such as
    # f"welcome-{user}", so that a retried step cannot send twice.
    return f"Welcome aboard, {user}!"


@workflow
async def welcome_flow(user_id: int) -> Welcome:
    user = await fetch_user(user_id)
    message = await send_welcome_email(user)
    return Welcome(user=user, message=message)
