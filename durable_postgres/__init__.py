"""PostgreSQL backend for durable-core: the store and the only claimer.

:class:`PostgresStore` runs the shared SQL rules over a bare asyncpg pool,
claims with ``FOR UPDATE SKIP LOCKED``, and wakes workers through
``LISTEN/NOTIFY``. :class:`EmbeddedPostgres` starts a local server from the
``pgserver`` wheel (the ``[embedded]`` extra) for a zero set-up quick start.

The names are imported on first use, so the entry-point plugin loads (and
can name the missing extra) even where asyncpg is not installed; so does
``from durable_postgres import PostgresStore`` there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .plugin import DRIVER

if TYPE_CHECKING:
    from .embedded import EmbeddedPostgres
    from .store import PostgresStore

_WHERE = {"EmbeddedPostgres": ".embedded", "PostgresStore": ".store"}

__all__ = ["EmbeddedPostgres", "PostgresStore"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "PostgresStore":
        DRIVER.require()  # names the extra, where the import would raise ModuleNotFoundError
    return getattr(importlib.import_module(module, __name__), name)
