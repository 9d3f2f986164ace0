"""``Reachability``: whether a database can be reached, as this process sees it, said in
two log lines.

When the database goes away (a restart, a failover to a promoted replica), every part
of a worker finds out on its own: each write in flight, the claim loop, the lease
renewals, the ``LISTEN`` and liveness sessions. They all report here. The first failure
after a good spell logs one warning (``database ... unavailable``); the ones after it,
until the database answers again, are logged at debug level only (their
:class:`~durable_core.errors.StoreUnavailableError` is marked ``reported``, so those
who retry it need not say so again); the first success after logs one line
(``database ... is back after 2.3s``).
"""

from __future__ import annotations

import threading
import time

from ..redaction import get_logger
from .errors import describe

logger = get_logger("durable_core.store")


class Reachability:
    """One database's reachability (by its description, without credentials)."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.down_since: float | None = None
        """When the current outage was first seen (``time.monotonic()``); ``None``: none."""

    def lost(self, what: str, exc: BaseException) -> bool:
        """Note that ``what`` could not reach the database (``exc`` said why): one warning
        for the first since it was last reached (then True), debug after it."""
        if self.down_since is not None:
            logger.debug("%s: %s still unavailable: %s", what, self.description, describe(exc))
            return False
        self.down_since = time.monotonic()
        logger.warning(
            "database %s unavailable (%s: %s): retrying until it is back",
            self.description,
            what,
            describe(exc),
        )
        return True

    def reached(self) -> None:
        """Note that the database answered: one line when it had been unavailable."""
        since, self.down_since = self.down_since, None
        if since is not None:
            logger.info(
                "database %s is back after %.1fs", self.description, time.monotonic() - since
            )


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
