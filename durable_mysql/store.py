"""``MySQLStore``: the portable SQLAlchemy store over aiomysql, for MariaDB 10.6+ and MySQL 8.

The tables are ``utf8mb4`` with a binary collation (names and ids compare
exactly, emoji included), JSON columns are ``LONGTEXT`` and times
``DATETIME(6)``. Sessions run in strict SQL mode, so an over-long value is an
error rather than silently truncated. SQLAlchemy's MySQL dialect connects with
the ``CLIENT_FOUND_ROWS`` flag, so an UPDATE's rowcount counts the rows it
matched even when it changed nothing: the fenced writes rely on that.

A statement larger than the server's ``max_allowed_packet`` makes the server
drop the connection, which looks like an outage. The store measures large
values first and refuses them with :class:`ValueTooLargeError` instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from durable_core.errors import InvalidDatabaseURLError, ValueTooLargeError
from durable_core.sql import SQLAlchemyConnector, SQLStore, classify_sqlalchemy
from durable_core.sql.errors import store_error
from durable_core.sql.urls import parse_url

from .dialect import DRIVER, MySQLDialect

_SCHEMES = ("mysql", "mariadb")

STRICT_MODE = (
    "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')"
)

# Characters the driver escapes with a backslash (each takes two bytes on the wire).
_ESCAPED = ("\\", "'", '"', "\n", "\r", "\x00", "\x1a")
# Values whose encoded size stays under this never need the server's limit.
_ALWAYS_FITS = 1 << 20
# Room left in a packet for the statement text and the other columns.
_STATEMENT_MARGIN = 64 * 1024


def normalize_url(url: str | sa.URL) -> sa.URL:
    """Accept ``mysql://``, ``mariadb://`` or ``mysql+aiomysql://``; return the aiomysql form."""
    parsed = parse_url(url, "MySQL")
    if parsed.get_backend_name() not in _SCHEMES:
        raise InvalidDatabaseURLError(f"not a MySQL/MariaDB URL: {str(url)!r}")
    if parsed.get_driver_name() not in ("aiomysql", "mysqldb", "pymysql"):
        raise InvalidDatabaseURLError(
            f"MySQL URL {parsed.render_as_string(hide_password=True)!r} names driver "
            f"{parsed.get_driver_name()!r}; durable-core uses aiomysql"
        )
    if not parsed.database:
        raise InvalidDatabaseURLError(
            f"MySQL URL {parsed.render_as_string(hide_password=True)!r} names no database"
        )
    query = dict(parsed.query)
    query.setdefault("charset", "utf8mb4")
    return parsed.set(drivername="mysql+aiomysql", query=query)


def wire_size(texts: Iterable[str | None]) -> int:
    """An upper bound of the bytes ``texts`` take in a statement, escapes included."""
    total = 0
    for text in texts:
        if text:
            encoded = len(text.encode("utf-8"))
            if encoded >= _ALWAYS_FITS // 2:
                encoded += sum(text.count(char) for char in _ESCAPED)
            total += encoded
    return total


class MySQLStore(SQLStore):
    """A store in MySQL or MariaDB. It enqueues and persists in full but cannot claim.

    Needs the ``[mysql]`` extra (aiomysql): without it,
    :class:`~durable_core.errors.ConfigurationError` names it."""

    def __init__(self, url: str | sa.URL, **engine_options: Any) -> None:
        DRIVER.require()
        parsed = normalize_url(url)
        engine_options.setdefault("pool_pre_ping", True)
        engine_options.setdefault("pool_recycle", 3600)
        connect_args = dict(engine_options.get("connect_args") or {})
        connect_args.setdefault("init_command", STRICT_MODE)
        engine_options["connect_args"] = connect_args
        self.connector: SQLAlchemyConnector = SQLAlchemyConnector(
            parsed, engine_options=engine_options
        )
        super().__init__(
            self.connector,
            MySQLDialect(),
            description=f"MySQL database {parsed.database} on {parsed.host or 'localhost'}",
        )
        self._max_packet: int | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine; there once the store is open."""
        self._require_open()
        return self.connector.engine

    async def close(self) -> None:
        self._max_packet = None
        await super().close()

    async def max_allowed_packet(self) -> int:
        """The server's ``max_allowed_packet`` in bytes (read once per open)."""
        if self._max_packet is None:
            rows = await self._fetch(
                "reading max_allowed_packet",
                sa.select(sa.literal_column("@@max_allowed_packet").label("size")),
                {},
            )
            self._max_packet = int(rows[0]["size"])
        return self._max_packet

    async def check_values(self, operation: str, *texts: str | None) -> None:
        """Refuse values that would not fit the server's ``max_allowed_packet``.

        A statement larger than that makes the server drop the connection, which
        would look like an outage; this says what happened instead.
        """
        size = wire_size(texts)
        if size < _ALWAYS_FITS:
            return
        limit = await self.max_allowed_packet()
        if size + _STATEMENT_MARGIN > limit:
            raise ValueTooLargeError(
                f"{operation} on {self.description}: {size} bytes of values do not fit the "
                f"server's max_allowed_packet of {limit} bytes, so nothing was written. Raise "
                "max_allowed_packet (e.g. `SET GLOBAL max_allowed_packet = 1073741824` and in "
                "the server config) or store a smaller value."
            )


async def ensure_database(url: str | sa.URL) -> None:
    """Create the database ``url`` names if it is missing (``utf8mb4``, binary collation).

    Raises :class:`~durable_core.errors.StoreUnavailableError` when the server
    cannot be reached.
    """
    DRIVER.require()
    parsed = normalize_url(url)
    name = str(parsed.database)
    description = f"MySQL server {parsed.host or 'localhost'}:{parsed.port or 3306}"
    server = sa.URL.create(
        parsed.drivername,
        username=parsed.username,
        password=parsed.password,
        host=parsed.host,
        port=parsed.port,
        query=parsed.query,
    )
    engine = create_async_engine(server)
    quoted = "`" + name.replace("`", "``") + "`"
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                f"CREATE DATABASE IF NOT EXISTS {quoted} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
    except (sa.exc.SQLAlchemyError, OSError) as exc:
        failure = classify_sqlalchemy(exc)
        assert failure is not None
        raise store_error(failure, exc, operation="ensure_database", store=description) from exc
    finally:
        await engine.dispose()
