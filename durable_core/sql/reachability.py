"""``Reachability``: whether a database can be reached, as this process sees it, said in
two log lines.

When the database goes away (a restart, a failover to a promoted replica), every part
of a worker finds out on its own: each write in flight, the claim loop, the lease
renewals, the ``LISTEN`` and liveness sessions. They all report here. The first failure
after a good spell logs one warning (``... is unreachable``); the ones after it,
until the database answers again, are logged at debug level only (their
:class:`~durable_core.errors.StoreUnavailableError` is marked ``reported``, so those
who retry it need not say so again); once it has answered for a second with no failure
between, one line says when it came back (``... is reachable again after 2.3s``).

A refusal of new connections (``too many clients``) is an outage too, reported the same
way by whoever met it: the worker opening its store (:mod:`durable_core.cli.common`), a
statement whose pool could not connect, the ``LISTEN`` and liveness sessions. As the
connections already open still answer then, an outage a session met lasts until that
session has connected again (or stopped trying).
"""

from __future__ import annotations

import threading
import time

from ..redaction import get_logger
from .errors import describe

logger = get_logger("durable_core.store")


SETTLED_SECONDS = 1.0
"""How long the database must answer, with no failure between, before it is said to be
back: a server shutting down answers some statements while it ends its sessions."""


class Reachability:
    """One database's reachability (by its description, without credentials)."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.down_since: float | None = None
        """When the current outage was first seen (``time.monotonic()``); ``None``: none."""
        self._answered_since: float | None = None
        """During an outage, when the database answered with no failure since."""
        self._sessions: set[str] = set()
        """The sessions that failed to connect during the outage and have not since: while
        the server refuses new connections (``too many clients``), those already open still
        answer, so the outage lasts until these connect again."""

    def lost(self, what: str, exc: BaseException, *, session: bool = False) -> bool:
        """Note that ``what`` could not reach the database (``exc`` said why): one warning
        for the first since it was last reached (then True), debug after it. ``session``:
        ``what`` is a session that connects again on its own (``LISTEN``, liveness, the
        worker opening its store); the outage lasts until it has."""
        self._answered_since = None
        if session:
            self._sessions.add(what)
        if self.down_since is not None:
            logger.debug("%s: %s still unreachable: %s", what, self.description, describe(exc))
            return False
        self.down_since = time.monotonic()
        logger.warning(
            "%s is unreachable (%s: %s); retrying with backoff until it is back",
            self.description,
            what,
            describe(exc),
        )
        return True

    def reached(self, session: str | None = None) -> None:
        """Note that the database answered (``session``: that session connected again): one
        line once it has answered for :data:`SETTLED_SECONDS` with no failure, and every
        session that failed has connected again, when it had been unreachable."""
        if self.down_since is None:
            return
        if session is not None:
            self._sessions.discard(session)
        if self._sessions:
            return
        now = time.monotonic()
        if self._answered_since is None:
            self._answered_since = now
        elif now - self._answered_since >= SETTLED_SECONDS:
            logger.info(
                "%s is reachable again after %.1fs",
                self.description,
                self._answered_since - self.down_since,
            )
            self.down_since = self._answered_since = None

    def stopped(self, session: str) -> None:
        """``session`` stopped trying (its store closed, its worker stopped): the outage no
        longer waits for it."""
        self._sessions.discard(session)


_KNOWN: dict[str, Reachability] = {}
_LOCK = threading.Lock()


def reachability(description: str) -> Reachability:
    """The :class:`Reachability` of the database ``description`` names, one per process
    (a worker's store, its ``LISTEN`` and liveness sessions and a client share it)."""
    known = _KNOWN.get(description)
    if known is None:
        with _LOCK:
            known = _KNOWN.setdefault(description, Reachability(description))
    return known


__all__ = ["Reachability", "reachability"]
