"""MySQL / MariaDB store for durable-core: persistence and enqueue (the worker needs PostgreSQL)."""

from .store import MySQLStore, ensure_database

__all__ = ["MySQLStore", "ensure_database"]
