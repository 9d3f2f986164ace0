"""``ExampleSQLStore``: the second route to a store, reusing durable-core's shared SQL rules.

It brings only what differs for its database: a dialect (SQLite's, here) and a
connector (SQLAlchemy's async engine). Every rule about a workflow row comes
from :class:`durable_core.sql.SQLStore`.
"""

from __future__ import annotations

from durable_core.errors import InvalidDatabaseURLError
from durable_core.sql import SQLAlchemyConnector, SQLStore
from durable_sqlite import SQLiteDialect

SCHEME = "example+sql:///"


class ExampleSQLStore(SQLStore):
    """A durable-core store for ``example+sql:///path.db`` URLs."""

    def __init__(self, url: str) -> None:
        if not url.startswith(SCHEME):
            raise InvalidDatabaseURLError(f"not an example SQL store URL: {url!r}")
        self.path = url.removeprefix(SCHEME)
        self.connector: SQLAlchemyConnector = SQLAlchemyConnector(
            f"sqlite+aiosqlite:///{self.path}", engine_options={"connect_args": {"timeout": 10}}
        )
        super().__init__(
            self.connector, SQLiteDialect(), description=f"example SQL store at {self.path}"
        )
