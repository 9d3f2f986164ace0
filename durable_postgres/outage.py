"""The database going away, said once: the ``LISTEN`` and liveness sessions and asyncpg's
pool report to the store's :class:`~durable_core.sql.reachability.Reachability` instead of
logging each failed reconnect (and asyncpg's pool, a traceback for each)."""

from __future__ import annotations

import logging

from durable_core.redaction import get_logger
from durable_core.sql import Failure
from durable_core.sql.errors import describe
from durable_core.sql.reachability import reachability

from .connector import classify

logger = get_logger("durable_postgres")


def unreachable(description: str, what: str, exc: BaseException, *, session: bool = False) -> bool:
    """Whether ``exc`` says the database cannot be reached now; if so it is noted (one
    warning for the whole outage; ``session``: see
    :meth:`~durable_core.sql.reachability.Reachability.lost`)."""
    if classify(exc) is not Failure.UNAVAILABLE:
        return False
    reachability(description).lost(what, exc, session=session)
    return True


class _PoolFloorFilter(logging.Filter):
    """Turns asyncpg's ``Failed to restore the pool connection floor`` warning (logged with
    a traceback on every failed background reconnect) into one debug line when the database
    is unreachable: the next statement reports the outage. Another cause is left loud."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Failed to restore the pool connection floor"):
            return True
        error = record.exc_info[1] if record.exc_info else None
        if error is None or classify(error) is not Failure.UNAVAILABLE:
            return True
        logger.debug("the pool could not reconnect in the background: %s", describe(error))
        return False


_FILTER = _PoolFloorFilter()


def quiet_pool_floor() -> None:
    """Install the filter on asyncpg's pool logger (once)."""
    pool_logger = logging.getLogger("asyncpg.pool")
    if _FILTER not in pool_logger.filters:
        pool_logger.addFilter(_FILTER)
