"""``TalkFeed``: one ``LISTEN durable_talk`` connection that wakes stream readers and update
callers in this process when a write of their workflow commits.

A watch is registered before its reader reads, so a write committed after that read
sets it. The connection is opened on the first wait and re-opened when lost; while
it is down, or just (re)opened, a wait returns at once or after its timeout (the
reader reads again), so nothing notified while nobody listened is waited for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import asyncpg

from durable_core import outages

from .dialect import TALK_CHANNEL
from .listener import close_connection

_CONNECT_TIMEOUT = 5.0
_RETRY_AFTER = 1.0
_WHAT = "LISTEN for stream writes (polling meanwhile)"


class TalkWatch:
    """What one reader waits on: a write or a reply of one workflow since its last wait."""

    notified = True

    def __init__(self, feed: TalkFeed, workflow_id: str) -> None:
        self.feed = feed
        self.workflow_id = workflow_id
        self.event = anyio.Event()
        self.fresh = True
        """Whether nothing proves the connection listened since this watch began."""

    async def wait(self, timeout: float) -> None:
        """Return on a write or reply of the workflow since the last wait, or after
        ``timeout`` seconds (at once when the feed was not listening before)."""
        listening = await self.feed.listen()
        if not listening or self.fresh:
            self.fresh = not listening
            if not listening:
                await anyio.sleep(max(timeout, 0.0))
            return
        with anyio.move_on_after(max(timeout, 0.0)):
            await self.event.wait()
        self.event = anyio.Event()

    async def close(self) -> None:
        """Stop watching."""
        self.feed.forget(self)


class TalkFeed:
    """Wakes the watches of each workflow named by a ``durable_talk`` notification."""

    def __init__(
        self, connect: Callable[[float], Awaitable[asyncpg.Connection]], description: str
    ) -> None:
        self._connect = connect
        self._description = description
        self._conn: asyncpg.Connection | None = None
        self._lock: anyio.Lock | None = None
        self._retry_at = 0.0
        self._watches: dict[str, set[TalkWatch]] = {}
        self._closed = False

    def watch(self, workflow_id: str) -> TalkWatch:
        """A watch of ``workflow_id``, woken by its writes and replies from now on."""
        made = TalkWatch(self, workflow_id)
        # Before its first listen, a watch's first wait returns at once: its reader reads again.
        made.fresh = not self.listening()
        self._watches.setdefault(workflow_id, set()).add(made)
        return made

    def forget(self, watch: TalkWatch) -> None:
        """Stop waking ``watch``."""
        found = self._watches.get(watch.workflow_id)
        if found is not None:
            found.discard(watch)
            if not found:
                del self._watches[watch.workflow_id]

    def listening(self) -> bool:
        """Whether the ``LISTEN`` connection is open now."""
        return self._conn is not None and not self._conn.is_closed()

    async def listen(self) -> bool:
        """Open the connection unless it is open or failed within the last second."""
        if self.listening():
            return True
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self.listening():
                return True
            if self._closed or anyio.current_time() < self._retry_at:
                return False
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._connect(_CONNECT_TIMEOUT)
                await conn.add_listener(TALK_CHANNEL, self._on_notify)
            except Exception as exc:
                if conn is not None:
                    conn.terminate()
                outages.unreachable(self._description, _WHAT, exc)
                self._retry_at = anyio.current_time() + _RETRY_AFTER
                return False
            conn.add_termination_listener(self._on_closed)
            self._conn = conn
            outages.reachable(self._description, _WHAT)
            return True

    async def close(self) -> None:
        """Stop listening; every watch wakes."""
        self._closed = True
        conn, self._conn = self._conn, None
        self._wake_all()
        if conn is not None:
            await close_connection(conn)

    def reopen(self) -> None:
        """Allow listening again (the store was opened again)."""
        self._closed = False

    def _wake_all(self) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.fresh = True
                watch.event.set()

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        for watch in self._watches.get(str(payload), ()):
            watch.event.set()

    def _on_closed(self, conn: object) -> None:
        if conn is self._conn:
            self._conn = None
            self._wake_all()  # what was written meanwhile went unheard: read again
