"""``MySQLStore``: the portable SQLAlchemy store over aiomysql, for MariaDB 10.6+ and MySQL 8."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from durable_core.errors import InvalidDatabaseURLError
from durable_core.sqlstore import SQLAlchemyStore

_SCHEMES = ("mysql", "mariadb")


def normalize_url(url: str | sa.URL) -> sa.URL:
    """Accept ``mysql://``, ``mariadb://`` or ``mysql+aiomysql://``; return the aiomysql form."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise InvalidDatabaseURLError(f"malformed MySQL URL {str(url)!r}: {exc}") from None
    if parsed.get_backend_name() not in _SCHEMES:
        raise InvalidDatabaseURLError(f"not a MySQL/MariaDB URL: {str(url)!r}")
    if not parsed.database:
        raise InvalidDatabaseURLError(
            f"MySQL URL {parsed.render_as_string(hide_password=True)!r} names no database"
        )
    query = dict(parsed.query)
    query.setdefault("charset", "utf8mb4")
    return parsed.set(drivername="mysql+aiomysql", query=query)


class MySQLStore(SQLAlchemyStore):
    """A store in MySQL or MariaDB. It enqueues and persists in full but cannot claim."""

    def __init__(self, url: str | sa.URL, **engine_options: Any) -> None:
        parsed = normalize_url(url)
        engine_options.setdefault("pool_pre_ping", True)
        engine_options.setdefault("pool_recycle", 3600)
        super().__init__(
            parsed,
            description=f"MySQL database {parsed.database} on {parsed.host or 'localhost'}",
            engine_options=engine_options,
        )
