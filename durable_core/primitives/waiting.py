"""Waiting in a workflow body: durable sleep, messages and events.

A wait that is not over suspends the workflow: it gives up its lease and its
worker slot, and only its row remains, marked ``waiting``. A message, a child
settling or the deadline wakes it, and its body replays from the step cache
to the point where it waited. None of this counts an attempt.
"""

from __future__ import annotations

import json
import random as _random
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from .. import durations
from ..codec import decode, encode
from ..errors import FrameworkError
from ..runtime.context import body_context
from ..seams.records import check_topic


async def sleep(duration: float | timedelta) -> None:
    """Sleep durably: in a workflow body, suspend until ``duration`` from the first time
    this call ran (a replay after the wake-up does not sleep again). Elsewhere, a plain
    ``anyio.sleep``."""
    delta = durations.delta(duration, "sleep duration")
    ctx = body_context()
    if ctx is None:
        await anyio.sleep(delta.total_seconds())
        return
    await ctx.run.sleep(json.dumps(delta.total_seconds()), delta)


async def sleep_until(moment: datetime) -> None:
    """Sleep durably until ``moment`` (timezone-aware) in a workflow body; elsewhere, a
    plain sleep until then."""
    durations.deadline(moment, "sleep_until moment")
    ctx = body_context()
    if ctx is None:
        await anyio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))
        return
    await ctx.run.sleep(json.dumps(moment.isoformat()), moment)


async def recv(topic: str = "", timeout: float | timedelta | None = None) -> Any:
    """The next message sent to this workflow on ``topic``, or ``None`` once ``timeout``
    has passed. Works in a workflow body only; each message is received exactly once,
    in the order sent."""
    ctx = body_context("recv()")
    if ctx is None:
        raise FrameworkError("recv() works only in a workflow body, run by a worker or runner")
    check_topic(topic)
    until = None if timeout is None else durations.delta(timeout, "recv timeout")
    output = await ctx.run.recv(topic, until)
    return decode(output, what=f"message on topic {topic!r} of workflow {ctx.workflow_id}")


async def set_event(key: str, value: Any) -> None:
    """Publish ``value`` under ``key`` for anyone to read with ``handle.get_event(key)``;
    a later call replaces it. Works in a workflow body only."""
    ctx = body_context("set_event()")
    if ctx is None:
        raise FrameworkError("set_event() works only in a workflow body")
    text = encode(value, what=f"event {key!r} of workflow {ctx.workflow_id}")
    await ctx.run.set_event(key, text)


async def now() -> datetime:
    """The current time (UTC). In a workflow body it is recorded the first time the call
    runs, so a replay gets the same moment (and a test runner's clock is obeyed); it
    then costs one write. Elsewhere, the wall clock."""
    ctx = body_context()
    if ctx is None:
        return datetime.now(UTC)
    return await ctx.run.now()


async def random() -> float:
    """A random float in [0, 1). In a workflow body it is recorded the first time the
    call runs, so a replay gets the same number; elsewhere, :func:`random.random`."""
    ctx = body_context()
    if ctx is None:
        return _random.random()
    return await ctx.run.random()
