"""Updates: a caller's named request to a running workflow, and the body's reply.

``await client.update(workflow_id, "approve", payload, timeout=...)`` sends the request
and waits for its reply. In the body, ``req = await recv_update("approve")`` takes the
next one (waiting durably, like ``recv``) and ``await req.reply(value)`` answers it.
Both are journaled: a replayed body gets the same request and replies once, and a
caller that sends again with the same ``update_id`` gets the same reply. A
``validate`` function given to ``recv_update`` can reject a request (by raising)
before it enters the history; its caller gets :class:`UpdateRejectedError`.

Updates are received where the body asks for them, as messages are, rather than by
handler methods running beside the body (Temporal's ``@workflow.update``): a body
here is a function that suspends and replays, and a request it takes at a call
site replays there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio

from .. import durations
from ..codec import decode, encode
from ..codec.failures import dump_error, load_error
from ..errors import (
    ConfigurationError,
    FrameworkError,
    UpdateNotHandledError,
    UpdateRejectedError,
    UpdateTimeoutError,
    WorkflowNotFoundError,
)
from ..runtime.context import body_context
from ..seams.records import UpdateStatus
from ..seams.roles import CallerStore
from ..seams.talk_roles import updates_of

MAX_NAME = 200
"""The longest update name (it is kept in ``waiting_for``, 255 characters wide)."""
MAX_ID = 64
"""The longest update id."""
POLL_SECONDS = 0.05
"""How often a caller looks for the reply on a store that cannot notify."""
NOTIFIED_POLL_SECONDS = 1.0
"""How often a caller woken by ``NOTIFY`` looks anyway (the workflow's end notifies nothing)."""


@dataclass(frozen=True)
class UpdateRequest:
    """An update the body received: its ``id``, ``name`` and decoded ``payload``."""

    id: str
    name: str
    payload: Any

    async def reply(self, value: Any = None) -> None:
        """Answer the caller with ``value`` (once: a replay does not answer again)."""
        ctx = body_context("UpdateRequest.reply()")
        if ctx is None:
            raise FrameworkError("UpdateRequest.reply() works only in a workflow body")
        text = encode(value, what=f"reply to update {self.name!r} of workflow {ctx.workflow_id}")
        await ctx.run.reply_update(self.id, text)


def check_name(name: Any) -> str:
    """``name`` if it names an update, else a :class:`ConfigurationError`."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ConfigurationError(
            f"an update name is a non-empty string of at most {MAX_NAME} characters, "
            f"got {name!r:.80}"
        )
    return name


async def recv_update(
    name: str,
    *,
    validate: Callable[[Any], object] | None = None,
    timeout: float | timedelta | None = None,
) -> UpdateRequest | None:
    """The next update ``name`` sent to this workflow, waiting durably for one (``None``
    once ``timeout`` has passed). ``validate(payload)`` may raise to reject a request:
    it is never received, and its caller gets :class:`UpdateRejectedError` with the
    message. Works in a workflow body only."""
    ctx = body_context("recv_update()")
    if ctx is None:
        raise FrameworkError("recv_update() works only in a workflow body")
    check_name(name)
    until = None if timeout is None else durations.delta(timeout, "recv_update timeout")
    what = f"update {name!r} of workflow {ctx.workflow_id}"

    def check(payload: str) -> str | None:
        if validate is None:
            return None
        try:
            validate(decode(payload, what=what))
        except Exception as exc:
            kind = type(exc)
            return dump_error(
                {"type": f"{kind.__module__}.{kind.__qualname__}", "message": str(exc)}
            )
        return None

    output = await ctx.run.recv_update(name, until, check)
    found = json.loads(output)
    if found is None:
        return None
    update_id, payload = found
    return UpdateRequest(update_id, name, decode(payload, what=what))


async def update(
    store: CallerStore,
    workflow_id: str,
    name: str,
    payload: Any = None,
    *,
    timeout: float | timedelta | None = None,
    update_id: str | None = None,
) -> Any:
    """Send the update and wait for its reply (see :meth:`DurableClient.update`)."""
    updates = updates_of(store)
    check_name(name)
    if update_id is None:
        update_id = str(uuid.uuid4())
    elif not isinstance(update_id, str) or not update_id or len(update_id) > MAX_ID:
        raise ConfigurationError(
            f"an update id is a non-empty string of at most {MAX_ID} characters, "
            f"got {update_id!r:.80}"
        )
    seconds = None if timeout is None else durations.seconds(timeout, "update timeout")
    text = encode(payload, what=f"payload of update {name!r} to workflow {workflow_id}")
    if body_context() is not None:
        raise FrameworkError(
            "update() waits for a reply, which a workflow body cannot do durably: send() a "
            "message from the body, or call update() from a step"
        )
    watch = updates.watch(workflow_id)  # before the send: no reply goes unheard
    try:
        record = await updates.send_update(workflow_id, update_id, name, text)
        deadline = None if seconds is None else anyio.current_time() + seconds
        pause = NOTIFIED_POLL_SECONDS if watch.notified else POLL_SECONDS
        ended = False
        while True:
            if record.status is UpdateStatus.REPLIED:
                assert record.reply is not None
                return decode(record.reply, what=f"reply to update {name!r} of {workflow_id}")
            if record.status is UpdateStatus.REJECTED:
                error = load_error(record.error) or {}
                raise UpdateRejectedError(
                    f"workflow {workflow_id} rejected update {name!r} ({update_id}): "
                    f"{error.get('type', 'error')}: {error.get('message', '')}"
                )
            if ended:
                raise UpdateNotHandledError(
                    f"workflow {workflow_id} ended without replying to update {name!r} "
                    f"({update_id}, {record.status.value})"
                )
            left = None if deadline is None else deadline - anyio.current_time()
            if left is not None and left <= 0:
                raise UpdateTimeoutError(
                    f"no reply to update {name!r} ({update_id}) of workflow {workflow_id} "
                    f"after {seconds}s; it stays sent: update again with update_id="
                    f"{update_id!r} to wait for the same reply"
                )
            info = await store.get_workflow(workflow_id)
            if info is None:
                raise WorkflowNotFoundError(f"no workflow with id {workflow_id!r}")
            ended = info.status.is_terminal  # then one more look: a reply before the end
            if not ended:
                wait = pause if left is None else min(pause, left)
                await watch.wait(wait)
            found = await updates.get_update(workflow_id, update_id)
            assert found is not None, "an update is never deleted while its workflow lives"
            record = found
    finally:
        with anyio.CancelScope(shield=True):
            await watch.close()
