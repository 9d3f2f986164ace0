"""One log line per database outage, however many parts of a process retry through it.

When the database cannot be reached, or refuses new connections (``too many clients``),
the worker's claim loop, its registry beat, its scheduler and the store's own sessions
(``LISTEN``, the liveness lock) each retry with backoff. :func:`unreachable` logs the
first failure of an outage as one WARNING (naming the error and saying that everything
retries), and the failures that follow at DEBUG. The outage ends, with one INFO line
saying how long it lasted, when the operation whose failure began it succeeds
(:func:`reachable`): a refusal of new connections leaves those already open working, so
another operation's success proves nothing.
"""

from __future__ import annotations

import time

from .redaction import get_logger

logger = get_logger("durable_core.outages")

_since: dict[str, tuple[float, str]] = {}
"""When each database's ongoing outage began (``time.monotonic()``) and the operation whose
failure began it, by the database's description."""


def unreachable(database: str, what: str, error: BaseException | str) -> None:
    """``what`` failed on ``database`` because it could not be reached (``error``): the first
    such failure since it was last reachable logs a WARNING, the others DEBUG."""
    if database in _since:
        logger.debug("%s failed on %s, still unreachable: %s", what, database, error)
        return
    _since[database] = (time.monotonic(), what)
    logger.warning(
        "%s is unreachable (%s failed: %s); retrying with backoff, quiet until it is back",
        database,
        what,
        error,
    )


def reachable(database: str, what: str) -> None:
    """``what`` succeeded on ``database``: end the outage its failure began, if any, with one
    INFO line."""
    ongoing = _since.get(database)
    if ongoing is not None and ongoing[1] == what:
        del _since[database]
        logger.info("%s is reachable again after %.1fs", database, time.monotonic() - ongoing[0])


def is_unreachable(database: str) -> bool:
    """Whether an outage of ``database`` is ongoing."""
    return database in _since


__all__ = ["is_unreachable", "reachable", "unreachable"]
