"""Entry-point plugin: ``postgresql://`` URLs and the embedded PostgreSQL."""

from __future__ import annotations

import importlib.util

from durable_core.caller.backends import Driver
from durable_core.seams.hookspecs import hookimpl
from durable_core.seams.store import EmbeddedDatabase, Store

DRIVER = Driver("asyncpg", extra="postgres", database="PostgreSQL")
"""What this backend needs installed (the ``[postgres]`` extra)."""


@hookimpl
def durable_store_from_url(url: str) -> Store | None:
    scheme = url.partition("://")[0].lower()
    if scheme not in ("postgres", "postgresql") and not scheme.startswith("postgresql+"):
        return None
    DRIVER.require()
    from .store import PostgresStore

    # Other postgresql+driver forms are ours too: PostgresStore rejects them by name.
    return PostgresStore(url)


@hookimpl
def durable_store_url_forms() -> list[str]:
    if not DRIVER.installed():
        return []
    return [
        "postgresql://user:password@host:5432/dbname",
        "postgresql://user@/dbname?host=/path/to/socket/dir",
    ]


@hookimpl
def durable_embedded_database(data_dir: str | None) -> EmbeddedDatabase | None:
    if importlib.util.find_spec("pgserver") is None:
        return None
    from .embedded import EmbeddedPostgres

    return EmbeddedPostgres(data_dir)
