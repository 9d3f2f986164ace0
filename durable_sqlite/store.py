"""``SQLiteStore``: the portable SQLAlchemy store over aiosqlite, tuned for SQLite."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from durable_core.errors import InvalidDatabaseURLError
from durable_core.sqlstore import SQLAlchemyStore

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


class SQLiteStore(SQLAlchemyStore):
    """A store in a SQLite file: WAL mode, a busy timeout, foreign keys on.

    Safe under several connections in one or more processes. It cannot claim
    work for a worker; use :class:`durable_core.testing.WorkflowRunner`.
    """

    def __init__(self, url: str | sa.URL, **engine_options: Any) -> None:
        parsed = normalize_url(url)
        super().__init__(
            parsed,
            description=f"SQLite database {parsed.database or ':memory:'}",
            engine_options=engine_options,
        )

    def create_engine(self) -> AsyncEngine:
        options = dict(self._engine_options)
        in_memory = self._url.database in (None, "", ":memory:")
        if in_memory:
            options.setdefault("poolclass", StaticPool)
        engine = create_async_engine(self._url, **options)

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
