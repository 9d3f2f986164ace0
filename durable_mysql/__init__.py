"""MySQL / MariaDB store for durable-core: persistence and enqueue (the worker needs PostgreSQL)."""

from .store import MySQLStore

__all__ = ["MySQLStore"]
