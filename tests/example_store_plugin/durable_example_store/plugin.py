"""Entry-point plugin: ``example+sqlite:///path`` URLs to an :class:`ExampleStore` (a store
written from scratch), ``example+sql:///path`` to an :class:`ExampleSQLStore` (the shared rules)."""

from __future__ import annotations

from durable_core.seams.hookspecs import hookimpl
from durable_core.seams.store import Store


@hookimpl
def durable_store_from_url(url: str) -> Store | None:
    if url.startswith("example+sql:"):
        from .sqlstore import ExampleSQLStore

        return ExampleSQLStore(url)
    if not url.startswith("example+sqlite:"):
        return None
    from .store import ExampleStore

    return ExampleStore(url)


@hookimpl
def durable_store_url_forms() -> list[str]:
    return ["example+sqlite:///path.db", "example+sql:///path.db"]
