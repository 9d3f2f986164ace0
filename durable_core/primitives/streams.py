"""Streams: a workflow body writes ordered values under a key; callers read them as they come.

``await write_stream(key, value)`` in a body appends ``value`` at the key's next offset
(0, 1, ...), once per call site: the value and the call's record commit together, so a
replayed or retried body never writes it twice. ``await close_stream(key)`` ends the
key. ``async for value in handle.read_stream(key, offset=0)`` reads them in order from
any offset, waking on each write (``NOTIFY`` on PostgreSQL, polling elsewhere), and
ends when the body closes the key or the workflow ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from ..codec import decode, encode
from ..errors import ConfigurationError, FrameworkError, WorkflowNotFoundError
from ..runtime.context import body_context
from ..seams.roles import CallerStore, describe
from ..seams.talk_roles import check_key, streams_of

POLL_SECONDS = 0.05
"""How often a reader looks for new values on a store that cannot notify."""
NOTIFIED_POLL_SECONDS = 1.0
"""How often a reader woken by ``NOTIFY`` looks anyway (the workflow's end notifies nothing)."""
PAGE = 500
"""How many values a reader takes per query."""


async def write_stream(key: str, value: Any) -> int:
    """Append ``value`` to this workflow's stream ``key``; its offset (0 for the first).
    Works in a workflow body only; a replay writes nothing again."""
    ctx = body_context("write_stream()")
    if ctx is None:
        raise FrameworkError("write_stream() works only in a workflow body")
    check_key(key)
    text = encode(value, what=f"value of stream {key!r} of workflow {ctx.workflow_id}")
    return await ctx.run.write_stream(key, text)


async def close_stream(key: str) -> None:
    """Close this workflow's stream ``key``: its readers end after its last value, and a
    later ``write_stream(key, ...)`` raises :class:`~durable_core.errors.StreamClosedError`.
    Works in a workflow body only."""
    ctx = body_context("close_stream()")
    if ctx is None:
        raise FrameworkError("close_stream() works only in a workflow body")
    check_key(key)
    await ctx.run.write_stream(key, None)


async def read_stream(
    store: CallerStore, workflow_id: str, key: str, offset: int = 0
) -> AsyncIterator[Any]:
    """The values of ``workflow_id``'s stream ``key`` from ``offset`` on, as they are
    written, until the key is closed or the workflow ends (see
    :meth:`~durable_core.caller.handle.WorkflowHandle.read_stream`)."""
    check_key(key)
    if body_context() is not None:
        raise FrameworkError(
            "read_stream() cannot run in a workflow body: what it reads is not journaled, so "
            "a replay would read differently. Read the stream in a step"
        )
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigurationError(f"a stream offset is an int >= 0, got {offset!r}")
    streams = streams_of(store)
    watch = streams.watch(workflow_id)  # before the first read: no later write goes unheard
    pause = NOTIFIED_POLL_SECONDS if watch.notified else POLL_SECONDS
    what = f"value of stream {key!r} of workflow {workflow_id}"
    ended = False
    try:
        while True:
            page = await streams.read_stream(workflow_id, key, offset, PAGE)
            for at, text in page.entries:
                yield decode(text, what=what)
                offset = at + 1
            if page.closed or ended:
                return
            if len(page.entries) == PAGE:
                continue
            record = await store.get_workflow(workflow_id)
            if record is None:
                raise WorkflowNotFoundError(
                    f"no workflow with id {workflow_id!r} in {describe(store)}"
                )
            if record.status.is_terminal:
                ended = True  # one more read: what it wrote before it ended
                continue
            await watch.wait(pause)
    finally:
        with anyio.CancelScope(shield=True):
            await watch.close()
