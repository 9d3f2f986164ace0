"""The event loop a :class:`~durable_core.caller.sync.SyncClient` runs its calls on: a
thread of its own with the store open on it, reopened in a forked child; and the guard
that refuses a blocking call where an event loop runs."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from contextlib import AbstractContextManager

from anyio.from_thread import BlockingPortal, start_blocking_portal

from ..errors import BlockingCallInEventLoopError, ConfigurationError
from ..seams.store import Store
from .backends import open_store

_lock = threading.Lock()
"""Guards opening and closing loops; a new one in each forked child (the parent's may have
been held, at the fork, by a thread the child does not have)."""


def _new_lock() -> None:
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock)


def refuse_in_event_loop(what: str) -> None:
    """Raise :class:`BlockingCallInEventLoopError` when an event loop runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
        trio = sys.modules.get("trio")
        if trio is not None:
            try:
                trio.lowlevel.current_trio_token()
                running = True
            except RuntimeError:
                pass
    else:
        running = True
    if running:
        raise BlockingCallInEventLoopError(
            f"SyncClient.{what}() was called where an event loop runs, which it would stall: "
            "in async code use DurableClient on a store opened there (await open_store(url)), "
            "or run the call in a thread (await anyio.to_thread.run_sync(...))"
        )


class _Loop:
    """An event loop in a thread of its own with the store for ``url`` open on it, in the
    process that made it."""

    def __init__(self, url: str | None) -> None:
        self.pid = os.getpid()
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal("asyncio")
        self.portal = self._portal_cm.__enter__()
        try:
            self.store: Store = self.portal.call(open_store, url)
        except BaseException as exc:
            self._portal_cm.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def close(self) -> None:
        try:
            self.portal.call(self.store.close)
        finally:
            self._portal_cm.__exit__(None, None, None)


class _Shared:
    """The loop the clients of one :class:`SyncClient` (and its ``with_options`` copies)
    share: reopened in a forked child, closed once."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self.closed = False
        self.current = _Loop(url)
        self.inherited: list[_Loop] = []
        """Loops made before a fork, by the parent: kept, never used, closed or collected
        here (their connections are the parent's)."""

    def loop(self) -> _Loop:
        """This process's loop, opened on the first call after a fork."""
        current = self.current
        if self.closed:
            raise ConfigurationError("this SyncClient is closed")
        if current.pid == os.getpid():
            return current
        with _lock:
            if self.current.pid != os.getpid():
                self.inherited.append(self.current)
                self.current = _Loop(self.url)
            return self.current

    def close(self) -> None:
        with _lock:
            if self.closed:
                return
            self.closed = True
            current = self.current
        if current.pid == os.getpid():
            current.close()
