"""``SQLiteStore``: the shared SQL store over aiosqlite, tuned for SQLite."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from durable_core.errors import InvalidDatabaseURLError
from durable_core.sql import SQLAlchemyConnector, SQLStore

from .dialect import DRIVER, SQLiteDialect

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
    """aiosqlite with WAL mode, a busy timeout and foreign keys on.

    An in-memory database is one pooled connection whose transactions take turns, on a
    database of SQLite's ``memdb`` VFS named for this connector and held by a keeper
    connection from :meth:`open` to :meth:`close`: it outlives the pooled connection
    when SQLAlchemy replaces that (where a private ``:memory:`` database would be
    replaced by an empty one).
    """

    def __init__(
        self, url: str | sa.URL, *, engine_options: Mapping[str, Any] | None = None
    ) -> None:
        in_memory = sa.make_url(url).database in (None, "", ":memory:")
        super().__init__(url, engine_options=engine_options, one_connection=in_memory)
        self._memory_name = f"file:/durable-{uuid.uuid4()}"
        self._keeper: sqlite3.Connection | None = None

    async def open(self) -> None:
        if self.one_connection and self._keeper is None:
            self._keeper = sqlite3.connect(
                f"{self._memory_name}?vfs=memdb", uri=True, check_same_thread=False
            )
        await super().open()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self._keeper is not None:
                keeper, self._keeper = self._keeper, None
                keeper.close()  # the last connection: the database goes with it

    @asynccontextmanager
    async def step_transaction(self, isolation: str) -> AsyncIterator[AsyncConnection]:
        """A transaction that holds the database's write lock from its start (``BEGIN
        IMMEDIATE``): SQLite's transactions are serializable whatever ``isolation`` asks,
        and a deferred one that read first would fail, not wait, when it came to write."""
        async with self._begun() as conn:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            yield conn

    def create_engine(self) -> AsyncEngine:
        options = dict(self.engine_options)
        in_memory = self.one_connection
        url = self.url
        if in_memory:
            options.setdefault("poolclass", StaticPool)
            url = url.set(database=self._memory_name, query={"vfs": "memdb", "uri": "true"})
        engine = create_async_engine(url, **options)

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

    Needs the ``[sqlite]`` extra (aiosqlite): without it,
    :class:`~durable_core.errors.ConfigurationError` names it. Safe under several
    connections in one or more processes. ``sqlite:///:memory:``
    is one connection, private to the store, whose transactions take turns: safe
    under concurrent tasks. It cannot claim work for a worker; run workflows with
    :class:`durable_core.testing.WorkflowRunner`.
    """

    def __init__(self, url: str | sa.URL, **engine_options: Any) -> None:
        DRIVER.require()
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
