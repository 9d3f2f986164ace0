"""A workflow holding personal data, for the crash test across a key rotation: a worker
started with ``PRIVATE_HOLD=1`` blocks in ``hold`` (after recording that it entered it in
the ``step_runs`` side table), so the test can SIGKILL it there."""

from __future__ import annotations

import os
from typing import Any

import anyio

from durable_core import recv, set_event, workflow, workflow_step
from tests.private_flows import Person
from tests.worker.app import record


@workflow_step(name="private.greet")
async def greet(who: Person) -> str:
    return f"Dear {who.name}"


@workflow_step(name="private.hold")
async def hold(who: Person) -> str:
    """Blocks for an hour in a worker started with PRIVATE_HOLD=1."""
    await record("hold")
    if os.environ.get("PRIVATE_HOLD"):
        await anyio.sleep(3600)
    return f"held for {who.email}"


@workflow(name="private.rotated")
async def rotated(who: Person) -> dict[str, Any]:
    letter = await greet(who)
    await set_event("letter", letter)
    held = await hold(who)
    note = await recv("approval", timeout=3600)
    return {"letter": letter, "held": held, "note": note}
