"""How loudly the runtime logs an operation it will retry while the database is away."""

from __future__ import annotations

import logging

from ..errors import StoreUnavailableError


def retry_log_level(exc: BaseException) -> int:
    """``DEBUG`` for a :class:`~durable_core.errors.StoreUnavailableError` whose store has
    logged its outage already (one line for the whole outage, not one per operation);
    ``WARNING`` for anything else."""
    if isinstance(exc, StoreUnavailableError) and exc.reported:
        return logging.DEBUG
    return logging.WARNING
