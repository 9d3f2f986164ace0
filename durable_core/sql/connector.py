"""The driver seam under ``SQLStore``: run a statement, classify a failure.

A connector knows nothing of workflows. It executes SQLAlchemy Core
statements (built once by :class:`~durable_core.sql.statements.Statements`),
opens a transaction when a rule needs several statements, runs the schema
upgrade, and says what kind of failure a driver exception is.
:class:`SQLAlchemyConnector` serves any database SQLAlchemy's async engine
reaches; ``durable_postgres`` has one over a bare asyncpg pool for its hot path.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, TypeVar

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .errors import Failure

T = TypeVar("T")


class Row(Protocol):
    """A result row: its columns by name."""

    def __getitem__(self, key: str) -> Any: ...


Params = Mapping[str, Any]


class Fetcher(Protocol):
    """Sends a statement and returns its rows."""

    async def fetch(self, statement: sa.Executable, params: Params | None = None) -> Sequence[Row]:
        """The rows the statement returns."""
        ...


class Session(Fetcher, Protocol):
    """Runs statements; inside :meth:`Connector.transaction`, all in one transaction."""

    async def execute(self, statement: sa.Executable, params: Params | None = None) -> int:
        """Run the statement; return how many rows it matched."""
        ...

    async def execute_many(self, statement: sa.Executable, params: Sequence[Params]) -> None:
        """Run the statement once per parameter set, in one transaction."""
        ...


class Connector(Session, Protocol):
    """A database connection pool as the shared SQL store needs it.

    Outside :meth:`transaction`, each statement is a transaction of its own.
    """

    async def open(self) -> None:
        """Connect (a pool may connect lazily)."""
        ...

    async def close(self) -> None:
        """Release every connection."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Session]:
        """A session whose statements commit together when the block ends without error."""
        ...

    async def run_sync(self, work: Callable[[sa.Connection], T]) -> T:
        """Run ``work`` on a synchronous SQLAlchemy connection, in one transaction (schema DDL)."""
        ...

    def classify(self, exc: BaseException) -> Failure | None:
        """What kind of database failure ``exc`` is; ``None`` when it is not one."""
        ...


# SQLite, MySQL/MariaDB and PostgreSQL naming one of the durable tables as missing.
_MISSING_TABLE = re.compile(
    r"(no such table: |table '[^']*\.|relation \")"
    r"(workflows|workflow_steps|durable_schema_versions)\b",
    re.IGNORECASE,
)
_REFUSED = ("access denied", "unknown database", "password authentication failed")
_DUPLICATE = ("unique constraint failed", "duplicate entry", "duplicate key")


def classify_sqlalchemy(exc: BaseException) -> Failure | None:
    """The :class:`Failure` of an exception from SQLAlchemy (any dialect) or the OS."""
    if not isinstance(exc, sa.exc.SQLAlchemyError | OSError | TimeoutError):
        return None
    driver = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    text = str(driver).lower()
    if _MISSING_TABLE.search(text):
        return Failure.SCHEMA_MISSING
    if any(marker in text for marker in _REFUSED):
        return Failure.REFUSED
    if isinstance(exc, sa.exc.IntegrityError) and any(marker in text for marker in _DUPLICATE):
        return Failure.DUPLICATE
    if isinstance(exc, sa.exc.DataError):
        return Failure.INVALID
    if isinstance(exc, OSError | TimeoutError | sa.exc.InterfaceError | sa.exc.TimeoutError):
        return Failure.UNAVAILABLE
    if isinstance(exc, sa.exc.DBAPIError) and (
        exc.connection_invalidated or isinstance(exc, sa.exc.OperationalError)
    ):
        return Failure.UNAVAILABLE
    return Failure.OTHER


class _EngineSession:
    def __init__(self, conn: AsyncConnection, *, shielded: bool = False) -> None:
        self.conn = conn
        self.shielded = shielded

    async def _run(self, statement: sa.Executable, params: Any) -> sa.CursorResult[Any]:
        with anyio.CancelScope(shield=self.shielded):
            result = await self.conn.execute(statement, params)
        return result

    async def fetch(self, statement: sa.Executable, params: Params | None = None) -> Sequence[Row]:
        result = await self._run(statement, dict(params or {}))
        return result.mappings().all()

    async def execute(self, statement: sa.Executable, params: Params | None = None) -> int:
        result = await self._run(statement, dict(params or {}))
        return int(result.rowcount)

    async def execute_many(self, statement: sa.Executable, params: Sequence[Params]) -> None:
        await self._run(statement, [dict(p) for p in params])


class SQLAlchemyConnector:
    """A connector over SQLAlchemy's async engine, for any database it has an async driver for.

    ``engine_options`` go to :func:`~sqlalchemy.ext.asyncio.create_async_engine`;
    subclasses override :meth:`create_engine` to add connection settings.

    With ``one_connection`` (an engine whose pool holds a single connection every
    checkout shares, as for in-memory SQLite) each transaction, and each statement
    outside one, has the connection to itself: the others wait their turn, since a
    commit or a return-to-pool rollback would end every transaction on it. A
    transaction opened inside another by the same task joins it. There no cancellation
    cuts a driver call short (connect, statement, commit, close): SQLAlchemy would
    discard the connection every task shares. It lands once the call ends; a wait for
    the turn is cancelled at once.
    """

    def __init__(
        self,
        url: str | sa.URL,
        *,
        engine_options: Mapping[str, Any] | None = None,
        one_connection: bool = False,
    ) -> None:
        self.url = sa.make_url(url)
        self.engine_options = dict(engine_options or {})
        self.one_connection = one_connection
        self._engine: AsyncEngine | None = None
        self._turn: anyio.Lock | None = None
        self._holders: dict[int, AsyncConnection] = {}

    @property
    def engine(self) -> AsyncEngine:
        """The engine; there once the connector is open."""
        if self._engine is None:
            raise RuntimeError("the connector is not open")
        return self._engine

    def create_engine(self) -> AsyncEngine:
        """Build the engine (called by :meth:`open`)."""
        return create_async_engine(self.url, **self.engine_options)

    async def open(self) -> None:
        if self._engine is None:
            self._engine = self.create_engine()
            self._turn = anyio.Lock() if self.one_connection else None

    async def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.dispose()

    @asynccontextmanager
    async def _begun(self) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction, committed when the block ends without error."""
        engine, turn = self.engine, self._turn
        if turn is None:
            async with engine.begin() as conn:
                yield conn
            return
        task = anyio.get_current_task().id
        held = self._holders.get(task)
        if held is not None:
            yield held
            return
        async with turn, _shielded_begin(engine) as conn:
            self._holders[task] = conn
            try:
                yield conn
            finally:
                del self._holders[task]

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_EngineSession]:
        async with self._begun() as conn:
            yield _EngineSession(conn, shielded=self.one_connection)

    async def fetch(self, statement: sa.Executable, params: Params | None = None) -> Sequence[Row]:
        async with self.transaction() as session:
            return await session.fetch(statement, params)

    async def execute(self, statement: sa.Executable, params: Params | None = None) -> int:
        async with self.transaction() as session:
            return await session.execute(statement, params)

    async def execute_many(self, statement: sa.Executable, params: Sequence[Params]) -> None:
        async with self.transaction() as session:
            await session.execute_many(statement, params)

    @asynccontextmanager
    async def step_transaction(self, isolation: str) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction at ``isolation`` (``"read committed"``...) for a
        transaction step's body and record, committed when the block ends without error."""
        if self._turn is not None:
            async with self._begun() as conn:  # the one connection: no level of its own
                yield conn
            return
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level=isolation.upper())
            async with conn.begin():
                yield conn

    async def run_sync(self, work: Callable[[sa.Connection], T]) -> T:
        async with self._begun() as conn:
            with anyio.CancelScope(shield=self.one_connection):
                done = await conn.run_sync(work)
        return done

    def classify(self, exc: BaseException) -> Failure | None:
        return classify_sqlalchemy(exc)


@asynccontextmanager
async def _shielded_begin(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """``engine.begin()`` whose connect, begin, commit and close no cancellation cuts short."""
    with anyio.CancelScope(shield=True):
        conn = await engine.connect()
        try:
            transaction = await conn.begin()
        except BaseException:
            await conn.close()
            raise
    try:
        yield conn
        with anyio.CancelScope(shield=True):
            await transaction.commit()
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()  # rolls back what was not committed
