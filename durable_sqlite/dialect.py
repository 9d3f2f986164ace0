"""How SQLite spells the shared SQL rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.dml import Insert

from durable_core.sql import Excluded, SQLDialect


class SQLiteDialect(SQLDialect):
    """SQLite 3.35+: the client's clock, ``ON CONFLICT DO UPDATE``, ``UPDATE ... RETURNING``."""

    name = "sqlite"
    update_returning = True

    def insert(self, table: sa.Table) -> Insert:
        return sqlite.insert(table)

    def upsert(
        self,
        insert: Insert,
        keys: Sequence[sa.Column[Any]],
        set_: Callable[[Excluded], Mapping[str, Any]],
    ) -> sa.Executable:
        assert isinstance(insert, sqlite.Insert)
        return insert.on_conflict_do_update(
            index_elements=list(keys), set_=dict(set_(lambda column: insert.excluded[column]))
        )
