"""How MySQL and MariaDB spell the shared SQL rules."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.sql.dml import Insert

from durable_core.caller.backends import Driver
from durable_core.sql import Excluded, SQLDialect

_MIGRATION_LOCK = "durable_core_migrate"

DRIVER = Driver("aiomysql", extra="mysql", database="MySQL/MariaDB")
"""What this backend needs installed (the ``[mysql]`` extra)."""


class MySQLDialect(SQLDialect):
    """MySQL 8 and MariaDB 10.6+: the client's clock, ``ON DUPLICATE KEY UPDATE``, and no
    ``UPDATE ... RETURNING`` (acquiring a lease reads the row back in the same transaction)."""

    name = "mysql"
    sqlalchemy_dialect: ClassVar[ModuleType] = mysql

    def upsert(
        self,
        insert: Insert,
        keys: Sequence[sa.Column[Any]],
        set_: Callable[[Excluded], Mapping[str, Any]],
    ) -> sa.Executable:
        assert isinstance(insert, mysql.Insert)
        return insert.on_duplicate_key_update(dict(set_(lambda column: insert.inserted[column])))

    def ignore_duplicates(self, insert: Insert, keys: Sequence[sa.Column[Any]]) -> Insert:
        assert isinstance(insert, mysql.Insert)
        return insert.on_duplicate_key_update({keys[0].name: insert.inserted[keys[0].name]})

    def before_quote(self, text: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.func.substring_index(text, sa.literal('"'), 1)

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[Any]:
        return sa.func.timestampdiff(sa.literal_column("MICROSECOND"), start, end) / 1e6

    @contextlib.contextmanager
    def migration_lock(self, conn: sa.Connection) -> Iterator[None]:
        # MySQL commits each DDL statement on its own, so a transaction cannot keep
        # two upgrades apart; a named server lock can.
        conn.execute(sa.select(sa.func.get_lock(_MIGRATION_LOCK, 60)))
        try:
            yield
        finally:
            conn.execute(sa.select(sa.func.release_lock(_MIGRATION_LOCK)))
