"""How SQLite spells the shared SQL rules: the defaults of :class:`~durable_core.sql.SQLDialect`."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

from sqlalchemy.dialects import sqlite

from durable_core.caller.backends import Driver
from durable_core.sql import SQLDialect

DRIVER = Driver("aiosqlite", extra="sqlite", database="SQLite")
"""What this backend needs installed (the ``[sqlite]`` extra)."""


class SQLiteDialect(SQLDialect):
    """SQLite 3.35+: the client's clock, ``ON CONFLICT DO UPDATE``, ``UPDATE ... RETURNING``."""

    name = "sqlite"
    update_returning = True
    sqlalchemy_dialect: ClassVar[ModuleType] = sqlite
