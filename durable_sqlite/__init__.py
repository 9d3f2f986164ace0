"""SQLite store for durable-core: persistence and enqueue for local use and tests."""

from .dialect import SQLiteDialect
from .store import SQLiteConnector, SQLiteStore

__all__ = ["SQLiteConnector", "SQLiteDialect", "SQLiteStore"]
