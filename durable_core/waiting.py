"""Waiting in a workflow body: durable sleep, messages and events.

A wait that is not over suspends the workflow: it gives up its lease and its
worker slot, and only its row remains, marked ``waiting``. A message, a child
settling or the deadline wakes it, and its body replays from the step cache
to the point where it waited. None of this counts an attempt.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from . import durations
from .client import DurableClient, current_store
from .context import WorkflowContext
from .errors import ConfigurationError, FrameworkError
from .journal import body_context, derived_id, nothing, once, wait
from .records import MAX_TOPIC, WaitKind
from .serialization import decode, encode


async def sleep(duration: float | timedelta) -> None:
    """Sleep durably: in a workflow body, suspend until ``duration`` from the first time
    this call ran (a replay after the wake-up does not sleep again). Elsewhere, a plain
    ``anyio.sleep``."""
    delta = durations.delta(duration, "sleep duration")
    ctx = body_context()
    if ctx is None:
        await anyio.sleep(delta.total_seconds())
        return
    await _sleep(ctx, json.dumps(delta.total_seconds()), delta)


async def sleep_until(moment: datetime) -> None:
    """Sleep durably until ``moment`` (timezone-aware) in a workflow body; elsewhere, a
    plain sleep until then."""
    durations.deadline(moment, "sleep_until moment")
    ctx = body_context()
    if ctx is None:
        await anyio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))
        return
    await _sleep(ctx, json.dumps(moment.isoformat()), moment)


async def _sleep(ctx: WorkflowContext, input_json: str, until: timedelta | datetime) -> None:
    await wait(
        ctx,
        "durable.sleep",
        input_json,
        kind=WaitKind.SLEEP,
        key="",
        until=until,
        over=nothing,
        timed_out=lambda deadline: json.dumps(deadline.isoformat()),
    )


async def recv(topic: str = "", timeout: float | timedelta | None = None) -> Any:
    """The next message sent to this workflow on ``topic``, or ``None`` once ``timeout``
    has passed. Works in a workflow body only; each message is received exactly once,
    in the order sent."""
    ctx = body_context("recv()")
    if ctx is None:
        raise FrameworkError("recv() works only in a workflow body, run by a worker or runner")
    if len(topic) > MAX_TOPIC:
        raise ConfigurationError(f"a topic is at most {MAX_TOPIC} characters, got {len(topic)}")
    until = None if timeout is None else durations.delta(timeout, "recv timeout")
    name, input_json = "durable.recv", json.dumps([topic])

    async def over(index: int) -> str | None:
        return await ctx.run.receive(topic, index, name, input_json)

    output = await wait(
        ctx,
        name,
        input_json,
        kind=WaitKind.MESSAGE,
        key=topic,
        until=until,
        over=over,
        timed_out=lambda deadline: "null",
    )
    return decode(output, what=f"message on topic {topic!r} of workflow {ctx.workflow_id}")


async def send(
    workflow_id: str, message: Any, *, topic: str = "", idempotency_key: str | None = None
) -> None:
    """Send ``message`` to a workflow's ``recv(topic)``, from anywhere. From a workflow
    body the send happens exactly once across replays; elsewhere, a repeated
    ``idempotency_key`` delivers nothing more."""
    ctx = body_context()
    if ctx is None:
        await DurableClient(current_store()).send(
            workflow_id, message, topic=topic, idempotency_key=idempotency_key
        )
        return
    payload = encode(message, what=f"message to workflow {workflow_id}")

    async def deliver(index: int) -> str:
        key = idempotency_key or derived_id(ctx.workflow_id, index)
        await ctx.store.send(workflow_id, topic, payload, key)
        return "null"

    await once(ctx, "durable.send", json.dumps([workflow_id, topic]), deliver)


async def set_event(key: str, value: Any) -> None:
    """Publish ``value`` under ``key`` for anyone to read with ``handle.get_event(key)``;
    a later call replaces it. Works in a workflow body only."""
    ctx = body_context("set_event()")
    if ctx is None:
        raise FrameworkError("set_event() works only in a workflow body")
    text = encode(value, what=f"event {key!r} of workflow {ctx.workflow_id}")
    run = ctx.run

    async def publish(index: int) -> str:
        await run.set_event(key, text)
        return "null"

    await once(ctx, "durable.set_event", json.dumps([key]), publish)
