"""Entry-point plugin: resolves ``mysql://`` and ``mariadb://`` URLs to a :class:`MySQLStore`."""

from __future__ import annotations

from durable_core.seams.hookspecs import hookimpl
from durable_core.seams.store import Store

from .dialect import DRIVER


@hookimpl
def durable_store_from_url(url: str) -> Store | None:
    if not url.startswith(("mysql:", "mysql+aiomysql:", "mariadb:", "mariadb+aiomysql:")):
        return None
    DRIVER.require()
    from .store import MySQLStore

    return MySQLStore(url)


@hookimpl
def durable_store_url_forms() -> list[str]:
    if not DRIVER.installed():
        return []
    return ["mysql://user:password@host:3306/dbname", "mariadb://user:password@host:3306/dbname"]
