"""The statements the floor issues: imported from the store, so the floor follows its SQL.

Nothing here is copied: when ``durable_postgres/store.py`` changes a statement,
the floor issues the changed statement too.
"""

from __future__ import annotations

import inspect
from typing import Any

import asyncpg

from durable_postgres import store as _store

CHANNEL: str = _store.CHANNEL
ENQUEUE: str = _store._ENQUEUE
CLAIM: str = _store.CLAIM_SQL
START_STEP: str = _store._START_STEP
COMPLETE_STEP: str = _store._COMPLETE_STEP
SETTLE_FINAL: str = _store._SETTLE_FINAL
SERVER_SETTINGS: dict[str, str] = dict(_store._DEFAULT_SERVER_SETTINGS)

_defaults = inspect.signature(_store.PostgresStore.__init__).parameters
POOL_MIN: int = _defaults["min_size"].default
"""The framework store's default pool bounds; the floor's pool uses the same."""
POOL_MAX: int = _defaults["max_size"].default


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Release a pooled connection without asyncpg's reset query.

    By default asyncpg sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL`` each time a connection goes back to the pool: one
    more round trip per statement. The floor sends the store's statements and
    nothing else.
    """


def pool_options(application_name: str) -> dict[str, Any]:
    """Keyword arguments for ``asyncpg.create_pool``: the framework's pool bounds, no reset."""
    return {
        "min_size": POOL_MIN,
        "max_size": POOL_MAX,
        "reset": _no_reset,
        "server_settings": {**SERVER_SETTINGS, "application_name": application_name},
    }
