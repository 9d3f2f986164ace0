"""Finding a store by database URL, through the ``durable_store_from_url`` hook.

The built-in backends register exactly as a third-party store plugin does:
an entry point in the ``durable_core`` group naming a module with hook
implementations.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass

from ..errors import ConfigurationError, InvalidDatabaseURLError
from ..redaction import redact
from ..seams.plugins import broken_plugins, plugin_manager
from ..seams.store import Store

DATABASE_URL_ENV = "DURABLE_DATABASE_URL"

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def driver_installed(module: str) -> bool:
    """Whether the driver module ``module`` can be imported (a backend lists its URL forms
    only then)."""
    return importlib.util.find_spec(module) is not None


def require_driver(module: str, *, extra: str, database: str) -> None:
    """Raise :class:`ConfigurationError` naming the extra to install when ``module`` is missing.

    A backend calls it before it builds a store, so that a URL naming a database
    whose driver is not installed says what to install instead of failing on import.
    """
    if not driver_installed(module):
        raise ConfigurationError(
            f"{database} needs the {module} driver, which is not installed: "
            f"pip install 'durable-core[{extra}]'"
        )


@dataclass(frozen=True)
class Driver:
    """A backend's driver: the module it imports, the extra that installs it, the database
    it reaches (each backend declares one, in its plugin module)."""

    module: str
    extra: str
    database: str

    def installed(self) -> bool:
        """Whether the driver can be imported."""
        return driver_installed(self.module)

    def require(self) -> None:
        """Raise :class:`ConfigurationError` naming the extra when the driver is missing:
        the plugin calls it before it resolves a URL, the store's constructor before it
        builds anything."""
        require_driver(self.module, extra=self.extra, database=self.database)


def url_forms() -> list[str]:
    """Every URL form the installed backends accept."""
    forms: list[str] = []
    for group in plugin_manager().hook.durable_store_url_forms():
        forms.extend(group)
    return sorted(set(forms))


def store_from_url(url: str) -> Store:
    """A store (not yet opened) for ``url``, from whichever installed backend accepts it."""
    if not isinstance(url, str) or not _SCHEME.match(url.strip()):
        raise InvalidDatabaseURLError(
            f"malformed database URL {redact(str(url))!r}: expected scheme://..., one of: "
            + ", ".join(url_forms())
        )
    store = plugin_manager().hook.durable_store_from_url(url=url.strip())
    if store is None:
        broken = "".join(
            f"; plugin {name!r} failed to load ({why})" for name, why in broken_plugins.items()
        )
        raise InvalidDatabaseURLError(
            f"no installed backend accepts {redact(url)!r}. Installed backends accept: "
            + (
                ", ".join(url_forms())
                or "none (install durable-core[postgres], [sqlite] or [mysql])"
            )
            + broken
        )
    return store  # type: ignore[no-any-return]


def database_url_from_env() -> str | None:
    """``DURABLE_DATABASE_URL``, or ``None`` when unset or empty."""
    value = os.environ.get(DATABASE_URL_ENV, "").strip()
    return value or None


async def open_store(url: str | None = None) -> Store:
    """Resolve ``url`` (default: ``DURABLE_DATABASE_URL``) to a store and open it."""
    url = url or database_url_from_env()
    if url is None:
        raise InvalidDatabaseURLError(
            f"no database URL given and {DATABASE_URL_ENV} is not set; one of: "
            + ", ".join(url_forms())
        )
    store = store_from_url(url)
    await store.open()
    return store
