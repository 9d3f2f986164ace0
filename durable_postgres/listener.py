"""``Listener``: the ``LISTEN`` connection that wakes an idle worker when work arrives.

It is opened on first use and re-opened (with backoff) when lost. Losing it
is never an error: a wait then lasts its timeout (the worker polls), and the
first wait after it is back returns at once, since notifications sent while
nobody listened are gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import asyncpg

from durable_core.redaction import get_logger
from durable_core.sql.reachability import reachability

from .outage import unreachable

logger = get_logger("durable_postgres")
_WHAT = "listening for new work"

_BACKOFF_MIN = 0.1
_BACKOFF_MAX = 5.0
_CONNECT_TIMEOUT_MAX = 10.0


async def close_connection(conn: asyncpg.Connection) -> None:
    """Close ``conn``, or drop it when it does not close in time."""
    try:
        await conn.close(timeout=5)
    except Exception:
        conn.terminate()


class Listener:
    """Listens on ``channel`` through a connection of its own."""

    def __init__(
        self,
        connect: Callable[[float], Awaitable[asyncpg.Connection]],
        channel: str,
        description: str,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._description = description
        self._conn: asyncpg.Connection | None = None
        self._lock: anyio.Lock | None = None
        self._retry_at = 0.0
        self._backoff = _BACKOFF_MIN
        self._notified = False
        # Set when the connection was lost: notifications may have gone unheard.
        self._missed = False
        self._wakeup: anyio.Event | None = None
        self._closed = False
        self._handlers: dict[str, Callable[[str], None]] = {}
        self._on_open: list[Callable[[], None]] = []

    def add_handler(self, channel: str, handler: Callable[[str], None]) -> None:
        """Also listen on ``channel``, calling ``handler(payload)`` for each notification.

        Takes effect when the connection is next opened: add handlers before listening.
        """
        self._handlers[channel] = handler

    def add_open_handler(self, handler: Callable[[], None]) -> None:
        """Call ``handler()`` each time the connection is opened, the first time included:
        what was notified while nobody listened is gone."""
        self._on_open.append(handler)

    def listening(self) -> bool:
        """Whether the ``LISTEN`` connection is open now."""
        return self._conn is not None and not self._conn.is_closed()

    def spend(self) -> None:
        """Forget earlier notifications: the caller is about to read the queue itself."""
        self._notified = False

    def caught_up(self) -> None:
        """The caller read the queue while listening: nothing was missed before this point."""
        if self.listening():
            self._missed = False

    async def close(self) -> None:
        """Stop listening and wake any waiter."""
        self._closed = True
        reachability(self._description).stopped(_WHAT)
        conn, self._conn = self._conn, None
        self._retry_at, self._backoff = 0.0, _BACKOFF_MIN
        if self._wakeup is not None:
            self._wakeup.set()
        if conn is not None:
            await close_connection(conn)

    def reopen(self) -> None:
        """Allow listening again after :meth:`close` (the store was opened again)."""
        self._closed = False

    async def wait(self, timeout: float) -> None:
        """Return on a notification since the last :meth:`spend`, or after ``timeout`` seconds."""
        deadline = anyio.current_time() + max(timeout, 0.0)
        while True:
            now = anyio.current_time()
            if not self.listening():
                await self.listen(min(max(deadline - now, 1.0), _CONNECT_TIMEOUT_MAX))
            if self._notified or (self._missed and self.listening()):
                self._notified = self._missed = False
                return
            now = anyio.current_time()
            if now >= deadline or self._closed:
                return
            wake_at = deadline if self.listening() else min(deadline, self._retry_at)
            self._wakeup = anyio.Event()
            with anyio.move_on_after(wake_at - now):
                await self._wakeup.wait()

    async def listen(self, timeout: float) -> bool:
        """Open the ``LISTEN`` connection unless backing off; True when it is open."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self.listening():
                return True
            if self._closed or anyio.current_time() < self._retry_at:
                return False
            stale, self._conn = self._conn, None
            if stale is not None:
                self._missed = True
                stale.terminate()
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._connect(timeout)
                await conn.add_listener(self._channel, self._on_notify)
                for channel in list(self._handlers):
                    await conn.add_listener(channel, self._on_handled)
            except Exception as exc:
                if conn is not None:
                    conn.terminate()
                if not unreachable(self._description, _WHAT, exc, session=True):
                    logger.warning(
                        "cannot listen for new work on %s (retrying in %.1fs; polling "
                        "meanwhile): %s",
                        self._description,
                        self._backoff,
                        exc,
                    )
                self._retry_at = anyio.current_time() + self._backoff
                self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
                return False
            if self._closed:  # closed while connecting
                await close_connection(conn)
                return False
            self._conn = conn
            conn.add_termination_listener(self._on_closed)
            self._backoff = _BACKOFF_MIN
            reachability(self._description).reached(_WHAT)
            for handler in self._on_open:
                try:
                    handler()
                except Exception:
                    logger.exception("handling a new listening connection failed")
            return True

    def _on_notify(self, _conn: object, _pid: int, _channel: str, _payload: object) -> None:
        self._notified = True
        if self._wakeup is not None:
            self._wakeup.set()

    def _on_handled(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        handler = self._handlers.get(channel)
        if handler is not None:
            try:
                handler(str(payload))
            except Exception:
                logger.exception("handling a notification on %s failed", channel)

    def _on_closed(self, conn: object) -> None:
        if conn is self._conn:
            self._missed = True
        if self._wakeup is not None:
            self._wakeup.set()
