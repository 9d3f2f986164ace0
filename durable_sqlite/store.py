"""``SQLiteStore``: the shared SQL store over aiosqlite, tuned for SQLite."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from durable_core.errors import InvalidDatabaseURLError
from durable_core.sql import SQLAlchemyConnector, SQLStore

from .dialect import SQLiteDialect

BUSY_TIMEOUT_MS = 10_000


def normalize_url(url: str | sa.URL) -> sa.URL:
    """Accept ``sqlite:///path`` or ``sqlite+aiosqlite:///path``; return the aiosqlite form."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise InvalidDatabaseURLError(f"malformed SQLite URL {str(url)!r}: {exc}") from None
    if parsed.get_backend_name() != "sqlite":
        raise InvalidDatabaseURLError(f"not a SQLite URL: {str(url)!r}")
    if parsed.get_driver_name() not in ("pysqlite", "aiosqlite"):
        raise InvalidDatabaseURLError(
            f"SQLite URL {str(url)!r} names driver {parsed.get_driver_name()!r}; use aiosqlite"
        )
    return parsed.set(drivername="sqlite+aiosqlite")


class SQLiteConnector(SQLAlchemyConnector):
    """aiosqlite with WAL mode, a busy timeout and foreign keys on (one pooled connection
    for an in-memory database, which would otherwise be a new empty one per connection:
    its transactions take turns on it)."""

    def __init__(
        self, url: str | sa.URL, *, engine_options: Mapping[str, Any] | None = None
    ) -> None:
        in_memory = sa.make_url(url).database in (None, "", ":memory:")
        super().__init__(url, engine_options=engine_options, one_connection=in_memory)

    def create_engine(self) -> AsyncEngine:
        options = dict(self.engine_options)
        in_memory = self.one_connection
        if in_memory:
            options.setdefault("poolclass", StaticPool)
        engine = create_async_engine(self.url, **options)

        @event.listens_for(engine.sync_engine, "connect")
        def _configure(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            if not in_memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine


class SQLiteStore(SQLStore):
    """A store in a SQLite file: WAL mode, a busy timeout, foreign keys on.

    Safe under several connections in one or more processes. ``sqlite:///:memory:``
    is one connection, private to the store, whose transactions take turns: safe
    under concurrent tasks. It cannot claim work for a worker; run workflows with
    :class:`durable_core.testing.WorkflowRunner`.
    """

    def __init__(self, url: str | sa.URL, **engine_options: Any) -> None:
        parsed = normalize_url(url)
        self.connector: SQLiteConnector = SQLiteConnector(parsed, engine_options=engine_options)
        super().__init__(
            self.connector,
            SQLiteDialect(),
            description=f"SQLite database {parsed.database or ':memory:'}",
        )

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine; there once the store is open. (In memory, what runs on
        it directly does not wait for the store's transactions.)"""
        self._require_open()
        return self.connector.engine
