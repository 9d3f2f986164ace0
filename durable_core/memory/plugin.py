"""Entry-point plugin: resolves ``memory://`` URLs to a :class:`MemoryStore`.

``memory://`` is a new, private store each time it is opened. ``memory://NAME`` is the
database ``NAME`` of this process: every store opened on it shares its tables (from any
thread: a ``SyncClient`` beside async code), for as long as one of them is referenced.
"""

from __future__ import annotations

import re
import threading
import weakref

from ..errors import InvalidDatabaseURLError
from ..seams.hookspecs import hookimpl
from ..seams.store import Store
from .store import MemoryStore
from .tables import Tables

SCHEME = "memory://"
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
_named: weakref.WeakValueDictionary[str, Tables] = weakref.WeakValueDictionary()
_naming = threading.Lock()


def memory_store(url: str) -> MemoryStore:
    """The store for ``memory://`` (private) or ``memory://NAME`` (shared by name)."""
    if not url.startswith(SCHEME):
        raise InvalidDatabaseURLError(f"not a memory URL: {url!r} (memory:// or memory://NAME)")
    name = url[len(SCHEME) :]
    if not name:
        return MemoryStore()
    if not _NAME.fullmatch(name):
        raise InvalidDatabaseURLError(
            f"malformed memory URL {url!r}: its name is 1 to 100 letters, digits, '_', '.' or '-'"
        )
    with _naming:
        tables = _named.get(name)
        if tables is None:
            tables = _named[name] = Tables()
    return MemoryStore(tables=tables, description=f"memory store {name}")


@hookimpl
def durable_store_from_url(url: str) -> Store | None:
    if not url.startswith("memory:"):
        return None
    return memory_store(url)


@hookimpl
def durable_store_url_forms() -> list[str]:
    return ["memory://", "memory://NAME"]
