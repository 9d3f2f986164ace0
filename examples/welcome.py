"""The quick-start workflow: fetch a user, send them a welcome mail, record that it went.

``make quickstart`` (:mod:`examples.quickstart`) runs it through real worker processes and
kills one in the middle of the slow second step. Each step notes in the file that
``DURABLE_QUICKSTART_LOG`` names (if set) when it starts and ends, and in which process,
so the quick start can show which steps ran where.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import anyio

from durable_core import workflow, workflow_step

LOG_ENV = "DURABLE_QUICKSTART_LOG"
MAIL_SECONDS = 3.0
"""How long the mail API takes: the window in which the quick start kills the worker."""


@dataclass(frozen=True)
class Welcome:
    user: str
    message: str
    receipt: str


def note(step: str, event: str) -> None:
    """Append ``{"step", "event", "pid"}`` to the quick start's log, when it keeps one."""
    path = os.environ.get(LOG_ENV)
    if path:
        line = {"step": step, "event": event, "pid": os.getpid(), "at": time.time()}
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")


@workflow_step
async def fetch_user(user_id: int) -> str:
    note("fetch_user", "started")
    user = f"user:{user_id}"
    note("fetch_user", "finished")
    return user


@workflow_step
async def send_welcome_email(user: str) -> str:
    note("send_welcome_email", "started")
    # A real step calls a mail API with an idempotency key such as f"welcome-{user}",
    # so that a step run again after a crash cannot send twice.
    await anyio.sleep(MAIL_SECONDS)
    note("send_welcome_email", "finished")
    return f"Welcome aboard, {user}!"


@workflow_step
async def record_sent(user: str) -> str:
    note("record_sent", "started")
    receipt = f"sent:{user}"
    note("record_sent", "finished")
    return receipt


@workflow
async def welcome_flow(user_id: int) -> Welcome:
    user = await fetch_user(user_id)
    message = await send_welcome_email(user)
    receipt = await record_sent(user)
    return Welcome(user=user, message=message, receipt=receipt)
