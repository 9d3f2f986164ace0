"""Entry-point plugin: resolves ``sqlite://`` URLs to a :class:`SQLiteStore`."""

from __future__ import annotations

from durable_core.seams.hookspecs import hookimpl
from durable_core.seams.store import Store

from .dialect import DRIVER


@hookimpl
def durable_store_from_url(url: str) -> Store | None:
    if not url.startswith(("sqlite:", "sqlite+aiosqlite:")):
        return None
    DRIVER.require()
    from .store import SQLiteStore

    return SQLiteStore(url)


@hookimpl
def durable_store_url_forms() -> list[str]:
    if not DRIVER.installed():
        return []
    return ["sqlite:///relative/path.db", "sqlite:////absolute/path.db"]
