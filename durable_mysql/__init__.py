"""MySQL / MariaDB store for durable-core: persistence and enqueue (the worker needs PostgreSQL)."""

from .dialect import MySQLDialect
from .store import MySQLStore, ensure_database

__all__ = ["MySQLDialect", "MySQLStore", "ensure_database"]
