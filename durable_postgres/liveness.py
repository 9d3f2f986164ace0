"""``LivenessLock``: a worker's liveness, held as a lock on a database session of its own.

The worker holds the session-level advisory lock ``(LIVENESS_LOCKS, key)`` on a
connection outside the pool for as long as it lives. PostgreSQL frees the lock the
moment that session ends (the process killed, its host gone, the connection cut), so
any other worker finds it dead at its next check
(:meth:`~durable_postgres.dialect.PostgresDialect.session_gone`) and its workflows are
taken over, instead of waiting for their leases to run out. A worker that is alive but
stalled (SIGSTOP, a long pause) keeps its session, so its leases run their course and
its late writes are fenced as before.

The key is drawn once per worker and kept: when the session is lost it is taken again
on a new one (with backoff), and meanwhile the worker's registry row names no lock, so
nobody takes the worker for dead on that account alone. A transaction-mode pooler
(PgBouncer's ``pool_mode = transaction``) cannot keep a session for a client: behind one
(``durable_pooler=transaction``) the lock is held on ``durable_direct_url``, or not at
all without it, and recovery then waits for lease expiry (:mod:`durable_postgres.pooler`).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime

import anyio
import asyncpg
from anyio.abc import TaskStatus

from durable_core.redaction import get_logger
from durable_core.sql.reachability import reachability

from .dialect import LIVENESS_LOCKS
from .listener import close_connection
from .outage import unreachable

logger = get_logger("durable_postgres")
_WHAT = "the liveness session"

TAKE = "SELECT pg_try_advisory_lock($1::int, $2::int) AS taken, pg_postmaster_start_time() AS epoch"
"""Take the lock ``(LIVENESS_LOCKS, key)`` for the session, if no other session holds it,
and read when the server started."""

_PING_SECONDS = 5.0
"""How often the held session is checked when nothing says it was lost (a cut that sends
no FIN is noticed this late, or when the operating system gives up on the socket)."""
_PING_TIMEOUT = 10.0
_CONNECT_TIMEOUT = 10.0
_BACKOFF_MIN = 0.1
_BACKOFF_MAX = 5.0


def new_key() -> int:
    """A liveness key: a positive 32-bit integer, drawn at random."""
    return secrets.randbelow(2**31 - 1) + 1


class LivenessLock:
    """The liveness lock of one worker and the session that holds it."""

    def __init__(
        self, connect: Callable[[float], Awaitable[asyncpg.Connection]], description: str
    ) -> None:
        self._connect = connect
        self._description = description
        self.key = new_key()
        self.held: tuple[int, datetime] | None = None
        """``(key, epoch)`` while a session holds the lock (``epoch``: when the server
        started); ``None`` while it does not."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the lock until cancelled, taking it again whenever its session is lost;
        started once the first try has ended, whether it took the lock or not."""
        backoff, started = _BACKOFF_MIN, False
        lost = outage = False
        try:
            while True:
                conn: asyncpg.Connection | None = None
                try:
                    conn = await self._connect(_CONNECT_TIMEOUT)
                    row = await conn.fetchrow(TAKE, LIVENESS_LOCKS, self.key, timeout=_PING_TIMEOUT)
                    if row is not None and row["taken"]:
                        self.held = (self.key, row["epoch"])
                        reached = reachability(self._description)
                        if lost and not outage and reached.down_since is None:
                            logger.warning(
                                "the liveness session on %s was lost and is held again; meanwhile "
                                "another worker may have taken over this worker's workflows",
                                self._description,
                            )
                        reached.reached(_WHAT)
                        backoff, lost, outage = _BACKOFF_MIN, False, False
                        if not started:
                            started = True
                            task_status.started()
                        await _until_lost(conn)
                        lost = True  # said once it is held again, or as the database's outage
                        logger.debug("the liveness session on %s was lost", self._description)
                    else:
                        # Its last session, cut off, may not have ended yet on the server.
                        logger.warning(
                            "the liveness lock %d is held by another session on %s; trying again",
                            self.key,
                            self._description,
                        )
                except Exception as exc:  # any failure to hold it is waited out, never fatal
                    if unreachable(self._description, _WHAT, exc, session=True):
                        outage = True  # said as the database's outage
                    else:
                        logger.warning(
                            "cannot hold the liveness session on %s (retrying in %.1fs): %s",
                            self._description,
                            backoff,
                            exc,
                        )
                finally:
                    self.held = None
                    if conn is not None:
                        with anyio.CancelScope(shield=True):
                            await close_connection(conn)
                if not started:
                    started = True
                    task_status.started()
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            reachability(self._description).stopped(_WHAT)


async def _until_lost(conn: asyncpg.Connection) -> None:
    """Return once ``conn`` is closed, or a check of it fails."""
    lost = anyio.Event()
    conn.add_termination_listener(lambda _conn: lost.set())
    while not conn.is_closed():
        with anyio.move_on_after(_PING_SECONDS):
            await lost.wait()
        if lost.is_set() or conn.is_closed():
            return
        await conn.fetchval("SELECT 1", timeout=_PING_TIMEOUT)


__all__ = ["TAKE", "LivenessLock", "new_key"]
