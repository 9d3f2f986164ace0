"""``AsyncpgConnector``: the shared SQL statements over a bare asyncpg pool.

Each SQLAlchemy Core statement is compiled once for asyncpg (``$n``
parameters, constants inline) and then sent straight to the pool, so a
statement costs what asyncpg costs and nothing of SQLAlchemy's execution
layer, which is measured to matter on the worker's hot path. SQLAlchemy's
engine is used only to upgrade the schema.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import asyncpg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg as sa_asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from durable_core.sql import Failure, classify_sqlalchemy
from durable_core.sql.connector import Params

from .pooler import apply_session

T = TypeVar("T")

_CONFLICT = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
"""A transaction the server rolled back for another's sake: retried as a brief outage is."""

UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    # What asyncpg raises when a query starts on a connection whose server
    # process has just been terminated (the pool then replaces the connection).
    asyncpg.InternalClientError,
    # A write on a standby (reached before its promotion, or by a URL that does not ask
    # for a read-write server): a failover in progress.
    asyncpg.ReadOnlySQLTransactionError,
    # A statement the server cancelled (statement_timeout, lock_timeout, an operator's
    # pg_cancel_backend): rolled back, so retried as a brief outage is.
    asyncpg.QueryCanceledError,
    asyncpg.LockNotAvailableError,
)
_REFUSED: tuple[type[BaseException], ...] = (
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidPasswordError,
    asyncpg.InvalidCatalogNameError,
)
_DIALECT = sa_asyncpg.dialect()  # type: ignore[no-untyped-call]
STORE_ONLY_SETTINGS = ("plan_cache_mode", "enable_seqscan")
"""Server settings the store's own sessions take (see :mod:`durable_postgres.store`) and a
transaction step's do not, unless its URL names them."""
_STEP_POOL_TIMEOUT = 3600.0
"""How long a transaction step waits for a connection of its pool (a busy worker's steps
take turns)."""
_CACHE_LIMIT = 512
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement as asyncpg takes it: the SQL text and how to order its parameters."""

    sql: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]

    def args(self, params: Params | None) -> list[Any]:
        """The positional arguments for ``params``."""
        given = params or {}
        if not self.defaults:
            try:
                return [given[name] for name in self.names]
            except KeyError:
                pass  # the loop below names the missing parameter
        values = []
        for name in self.names:
            value = given.get(name, self.defaults.get(name, _MISSING))
            if value is _MISSING:
                raise TypeError(f"no value for parameter {name!r} of: {self.sql}")
            values.append(value)
        return values


def compile_statement(statement: sa.Executable) -> Compiled:
    """Compile ``statement`` for asyncpg."""
    assert isinstance(statement, sa.ClauseElement)
    compiled = statement.compile(dialect=_DIALECT, compile_kwargs={"render_postcompile": True})
    assert isinstance(compiled, sa.sql.compiler.SQLCompiler)
    names = tuple(compiled.positiontup or ())
    defaults = {
        name: compiled.binds[name].effective_value
        for name in names
        if not compiled.binds[name].required
    }
    return Compiled(str(compiled), names, defaults)


def driver_error(exc: BaseException) -> BaseException:
    """The asyncpg (or OS) exception under a SQLAlchemy wrapper, else ``exc`` itself."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        return exc.orig.__cause__ or exc.orig
    return exc


def classify(exc: BaseException) -> Failure | None:
    """The :class:`Failure` of an asyncpg, OS or SQLAlchemy exception."""
    cause = driver_error(exc)
    if isinstance(cause, asyncpg.UndefinedTableError):
        text = str(cause)
        if "workflow" in text or "durable_" in text:
            return Failure.SCHEMA_MISSING
        return Failure.OTHER
    if isinstance(cause, UNAVAILABLE):
        return Failure.UNAVAILABLE
    if isinstance(cause, _CONFLICT):
        return Failure.CONFLICT
    if isinstance(cause, _REFUSED):
        return Failure.REFUSED
    if isinstance(cause, asyncpg.UniqueViolationError):
        return Failure.DUPLICATE
    if isinstance(cause, asyncpg.DataError):  # SQLSTATE class 22: a value the column refuses
        return Failure.INVALID
    if isinstance(cause, asyncpg.PostgresError):
        return Failure.OTHER
    return classify_sqlalchemy(exc)


def _count(status: str) -> int:
    """The row count of a command status such as ``UPDATE 3`` or ``INSERT 0 1``."""
    tail = status.rpartition(" ")[2]
    return int(tail) if tail.isdigit() else 0


async def keep_session(conn: asyncpg.Connection) -> None:
    """The pool's ``reset`` hook: nothing to undo.

    asyncpg's default reset sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL`` on every release, one more round trip per statement. Pooled
    connections here only ever run statements (no SET, LISTEN, cursors or session
    locks; ``LISTEN`` has its own connection; the settings a session-mode pooler gets
    after connecting are meant to last), and asyncpg still rolls back a transaction
    left open.
    """


def _with_settings(
    settings: Mapping[str, str], init: Callable[[asyncpg.Connection], Awaitable[None]] | None
) -> Callable[[asyncpg.Connection], Awaitable[None]]:
    """The pool's ``init`` hook: set ``settings`` on each new connection, then run ``init``."""

    async def setup(conn: asyncpg.Connection) -> None:
        await apply_session(conn, settings)
        if init is not None:
            await init(conn)

    return setup


class _Statements:
    """Runs compiled statements on ``target``: the pool, or one connection in a transaction
    (both have asyncpg's ``fetch``, ``execute`` and ``executemany``)."""

    target: Any

    def __init__(self, compiled: Callable[[sa.Executable], Compiled], target: Any) -> None:
        self.compiled = compiled
        self.target = target

    async def fetch(self, statement: sa.Executable, params: Params | None = None) -> Any:
        compiled = self.compiled(statement)
        return await self.target.fetch(compiled.sql, *compiled.args(params))

    async def execute(self, statement: sa.Executable, params: Params | None = None) -> int:
        compiled = self.compiled(statement)
        return _count(await self.target.execute(compiled.sql, *compiled.args(params)))

    async def execute_many(self, statement: sa.Executable, params: Sequence[Params]) -> None:
        compiled = self.compiled(statement)
        await self.target.executemany(compiled.sql, [compiled.args(p) for p in params])


def usable(conn: Any) -> bool:
    """Whether a pooled connection kept between statements still has its session (the pool
    takes back one whose server closed it, and it then refuses every call)."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False


class HeldConnection:
    """A pooled connection one task keeps for the statements it sends one after another
    (the group commit's flushes, the claims): each skips the pool's acquire and release,
    about 40 µs of the worker's CPU and as much of each round trip.

    A statement sent while another is in flight goes through the pool. A connection whose
    session ended while it was kept is dropped before a statement. A statement that
    fails or is cancelled gives its connection back (the pool waits for the server to
    cancel it, and replaces a broken one), and the next takes another. The connector
    takes it back when it closes.
    """

    def __init__(self, connector: AsyncpgConnector) -> None:
        self.connector = connector
        self._conn: Any = None
        self._pool: asyncpg.Pool | None = None
        """The pool ``_conn`` came from (the connector's, unless it closed since)."""
        self.busy = False
        """A statement of this connection is in flight."""

    async def fetch(self, statement: sa.Executable, params: Params | None = None) -> Any:
        if self.busy:
            return await self.connector.fetch(statement, params)
        compiled = self.connector.compiled(statement)
        self.busy = True
        try:
            conn = self._conn
            if conn is not None and not usable(conn):
                await self.release()  # the pool may have taken it back as its server went
                conn = None
            if conn is None:
                self._pool = pool = self.connector.pool
                conn = self._conn = await pool.acquire()
            return await conn.fetch(compiled.sql, *compiled.args(params))
        except BaseException:  # asyncpg cancels a cancelled statement on the server first
            await self.release()
            raise
        finally:
            self.busy = False
            if self._pool is not self.connector.target:
                await self.release()  # the connector closed while the statement ran

    async def release(self) -> None:
        """Give the connection back to the pool (the next statement takes another)."""
        conn, pool, self._conn, self._pool = self._conn, self._pool, None, None
        if conn is not None and pool is not None:
            # Its pool may have been closed under it, closing its connections too.
            with anyio.CancelScope(shield=True), suppress(asyncpg.InterfaceError):
                await pool.release(conn)


class AsyncpgConnector(_Statements):
    """A pool of asyncpg connections running compiled Core statements.

    ``pool_options`` go to :func:`asyncpg.create_pool`, ``connect_options`` to
    every connection (the pool's and :meth:`connect`'s).
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        pool_options: Mapping[str, Any] | None = None,
        connect_options: Mapping[str, Any] | None = None,
        session_settings: Mapping[str, str] | None = None,
    ) -> None:
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self.pool_options = {"reset": keep_session, **(pool_options or {})}
        self.connect_options = dict(connect_options or {})
        self.session_settings = dict(session_settings or {})
        """Server settings set on each new connection of the pool, the transaction steps'
        and the schema's, rather than sent at startup (a pooler in session mode)."""
        if self.session_settings:
            self.pool_options["init"] = _with_settings(
                self.session_settings, self.pool_options.get("init")
            )
        self._compiled: dict[int, tuple[sa.Executable, Compiled]] = {}
        self._held: list[HeldConnection] = []
        self._step_engine: AsyncEngine | None = None
        super().__init__(self.compile_once, None)

    @property
    def pool(self) -> asyncpg.Pool:
        """The pool; there once the connector is open."""
        if self.target is None:
            raise RuntimeError("the connector is not open")
        return self.target

    def compile_once(self, statement: sa.Executable) -> Compiled:
        """``statement`` compiled for asyncpg, once per statement object."""
        entry = self._compiled.get(id(statement))
        if entry is not None and entry[0] is statement:
            return entry[1]
        if len(self._compiled) >= _CACHE_LIMIT:
            self._compiled.clear()
        compiled = compile_statement(statement)
        self._compiled[id(statement)] = (statement, compiled)
        return compiled

    def held(self) -> AsyncpgConnector | HeldConnection:
        """A connection for one task's statements, kept between them (see
        :class:`HeldConnection`); the pool itself when it is too small to spare one and
        still leave two to every other statement."""
        if self.max_size - len(self._held) - 1 < 2:
            return self
        held = HeldConnection(self)
        self._held.append(held)
        return held

    async def connect(self, timeout: float | None = None) -> asyncpg.Connection:
        """A connection of its own, outside the pool (for ``LISTEN``)."""
        return await asyncpg.connect(self.dsn, timeout=timeout, **self.connect_options)

    async def open(self) -> None:
        if self.target is None:
            self.target = await asyncpg.create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                **self.pool_options,
                **self.connect_options,
            )

    def _sqlalchemy_args(self) -> dict[str, Any]:
        """SQLAlchemy's asyncpg options: no prepared statement kept when asyncpg keeps none
        (behind a transaction pooler, where a statement cannot outlive its transaction)."""
        if self.connect_options.get("statement_cache_size") == 0:
            return {"prepared_statement_cache_size": 0}
        return {}

    def step_engine(self) -> AsyncEngine:
        """The SQLAlchemy engine transaction steps run on (made at first use): a pool of
        its own, as large as this one, whose sessions keep the server's own planner
        settings (the user's statements are planned as the server plans them)."""
        if self._step_engine is None:
            self.pool  # noqa: B018 - fails when the connector is not open
            options = dict(self.connect_options)
            settings = dict(options.get("server_settings") or {})
            session = dict(self.session_settings)
            for name in STORE_ONLY_SETTINGS:
                settings.pop(name, None)
                session.pop(name, None)
            options["server_settings"] = settings
            dsn = self.dsn

            async def connect() -> asyncpg.Connection:
                conn = await asyncpg.connect(dsn, **options)
                await apply_session(conn, session)
                return conn

            self._step_engine = create_async_engine(
                "postgresql+asyncpg://",
                async_creator=connect,
                pool_size=self.max_size,
                max_overflow=0,
                pool_timeout=_STEP_POOL_TIMEOUT,
                connect_args=self._sqlalchemy_args(),
            )
        return self._step_engine

    @asynccontextmanager
    async def step_transaction(self, isolation: str) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction at ``isolation`` for a transaction step's body and
        record (``BEGIN ISOLATION LEVEL ...``, one round trip), committed when the block
        ends without error."""
        async with self.step_engine().connect() as conn:
            await conn.execution_options(isolation_level=isolation.upper())
            async with conn.begin():
                yield conn

    async def close(self) -> None:
        if self.target is not None:
            for held in self._held:
                if not held.busy:  # one in flight fails as the pool closes under it
                    await held.release()
        step_engine, self._step_engine = self._step_engine, None
        if step_engine is not None:
            await step_engine.dispose()
        pool, self.target = self.target, None
        if pool is not None:
            try:
                with anyio.fail_after(10):
                    await pool.close()
            except Exception:  # a hung or broken connection: drop them all
                pool.terminate()

    async def execute_many(self, statement: sa.Executable, params: Sequence[Params]) -> None:
        if len(params) == 1:
            await self.execute(statement, params[0])
            return
        async with self.transaction() as session:
            await session.execute_many(statement, params)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Statements]:
        async with self.pool.acquire() as conn, conn.transaction():
            yield _Statements(self.compiled, conn)

    async def run_sync(self, work: Callable[[sa.Connection], T]) -> T:
        from sqlalchemy.pool import NullPool

        self.pool  # noqa: B018 - fails when the connector is not open

        async def connect() -> asyncpg.Connection:
            conn = await asyncpg.connect(self.dsn, **self.connect_options)
            await apply_session(conn, self.session_settings)
            return conn

        engine = create_async_engine(
            "postgresql+asyncpg://",
            async_creator=connect,
            poolclass=NullPool,
            connect_args=self._sqlalchemy_args(),
        )
        try:
            async with engine.begin() as conn:
                return await conn.run_sync(work)
        finally:
            await engine.dispose()

    def classify(self, exc: BaseException) -> Failure | None:
        return classify(exc)
