"""SQLite store for durable-core: persistence and enqueue for local use and tests."""

from .store import SQLiteStore

__all__ = ["SQLiteStore"]
