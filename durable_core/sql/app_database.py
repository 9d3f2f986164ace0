"""``AppDatabase``: another database transaction steps write to, and our table there.

A service's own tables usually live in a database beside the durable one. A transaction
step on it records its output in ``durable_step_outputs``, a small table of ours in that
database, in the transaction that ran its body, keyed by the workflow and the call's path
(the same in every run, unlike its index). The store's step row follows, written after
the commit like a plain step's end; a replay that finds no succeeded step row looks in
``durable_step_outputs`` first (inside the new transaction), and what it finds there wins:
the body does not run again. Two runs of one call at once (a worker that lost its lease
and the one that took it over) cannot both commit: the second's insert of the record
conflicts, and it returns the first's output.

The table is made by ``durable migrate --app-database URL`` or :meth:`AppDatabase.migrate`,
or else at first use (which needs a user allowed to create tables there).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..durations import utcnow
from ..errors import (
    AppDatabaseError,
    AppDatabaseUnavailableError,
    FrameworkError,
    InvalidDatabaseURLError,
    StepNameMismatchError,
    StoreError,
    StoreUnavailableError,
    TransactionConflictError,
)
from ..redaction import redact
from ..seams.plugins import plugin_manager
from ..seams.transactions import IsolationLevel, TransactionCall
from . import errors
from .base import SQLStoreBase
from .coltypes import UTCDateTime, json_text
from .connector import classify_sqlalchemy
from .errors import Failure
from .transactions import (
    conflict_error,
    from_database,
    is_conflict,
    step_connector,
    translated,
)

OUTPUTS_TABLE = "durable_step_outputs"

metadata = sa.MetaData()
outputs = sa.Table(
    OUTPUTS_TABLE,
    metadata,
    sa.Column("workflow_id", sa.String(36), primary_key=True),
    sa.Column("path", sa.String(255), primary_key=True),
    sa.Column("step_name", sa.String(255), nullable=False),
    sa.Column("output", json_text(), nullable=False),
    sa.Column("recorded_at", UTCDateTime(), nullable=False),
)
"""The record of each transaction step that committed on an application database."""

_RECORDED = sa.select(outputs.c.step_name, outputs.c.output).where(
    outputs.c.workflow_id == sa.bindparam("workflow"), outputs.c.path == sa.bindparam("path")
)
_RECORD = outputs.insert()

_in_use: set[AppDatabase] = set()
"""The application databases with connections open in some event loop."""


class AppDatabase:
    """An application database (PostgreSQL, SQLite, MySQL/MariaDB) that transaction steps
    write to: ``@transaction_step(database=orders)`` with ``orders =
    AppDatabase("postgresql://app@db/orders")``.

    Declare it beside your steps; it connects at first use in each event loop, and a
    worker closes it as it stops (:meth:`close` does it elsewhere, and ``async with``
    closes it at the block's end). Its record table is made by :meth:`migrate` (``durable
    migrate --app-database URL``) or at first use.
    """

    records_steps = False

    def __init__(self, url: str) -> None:
        if not isinstance(url, str) or "://" not in url:
            raise InvalidDatabaseURLError(
                f"AppDatabase takes a database URL (postgresql://, sqlite:///, mysql://), "
                f"got {redact(str(url))!r}"
            )
        self.url = url
        self._opened: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Opened] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def description(self) -> str:
        """The database, with no credential in it."""
        return f"application database {redact(self.url)}"

    def __repr__(self) -> str:
        return f"AppDatabase({redact(self.url)!r})"

    async def migrate(self) -> None:
        """Make the record table if it is missing (nothing else in the database changes)."""
        await self._ready()

    async def close(self) -> None:
        """Close this event loop's connections (the next use opens them again)."""
        opened = self._opened.pop(asyncio.get_running_loop(), None)
        if not self._opened:
            _in_use.discard(self)
        if opened is not None:
            await opened.store.close()

    async def __aenter__(self) -> AppDatabase:
        await self._ready()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # -- transaction steps (a StepDatabase) -------------------------------------------------------

    @asynccontextmanager
    async def transaction(
        self, call: TransactionCall | None, isolation: IsolationLevel
    ) -> AsyncIterator[_AppTransaction]:
        """A transaction at ``isolation`` whose record, if ``call`` is given, is a row of
        ``durable_step_outputs``."""
        opened = await self._ready()
        async with (
            translated(self.failure) as body,
            step_connector(opened.store).step_transaction(isolation) as conn,
            body(),
        ):
            yield _AppTransaction(self, opened.store, conn, call)

    def failure(self, exc: Exception, *, ours: bool = False) -> Exception:
        """A conflict as :class:`TransactionConflictError`, the database out of reach as
        :class:`AppDatabaseUnavailableError`, our table gone as :class:`AppDatabaseError`,
        anything else (the body's own error) as it is (``ours``: raised connecting or
        committing, where anything is the database's)."""
        if isinstance(exc, FrameworkError):
            return exc
        if is_conflict(exc):
            return conflict_error(exc, self.description)
        opened = self._opened.get(asyncio.get_running_loop())
        classified = _classify(None if opened is None else opened.store, exc)
        if classified is Failure.UNAVAILABLE and from_database(exc, ours):
            return AppDatabaseUnavailableError(
                f"{self.description} is unreachable: {errors.describe(exc)}"
            )
        if classified is Failure.SCHEMA_MISSING:
            return AppDatabaseError(
                f"{self.description} has no {OUTPUTS_TABLE} table: run `durable migrate "
                f"--app-database URL` ({errors.describe(exc)})"
            )
        return exc

    # -- connecting -------------------------------------------------------------------------------

    async def _ready(self) -> _Opened:
        """This loop's connections, with the record table there."""
        loop = asyncio.get_running_loop()
        opened = self._opened.get(loop)
        if opened is None:
            opened = self._opened[loop] = _Opened(_store_for(self.url))
            _in_use.add(self)
        if opened.ready:
            return opened
        async with opened.lock:
            if not opened.ready:
                await self._open(opened)
                opened.ready = True
        return opened

    async def _open(self, opened: _Opened) -> None:
        try:
            await opened.store.open()
        except StoreUnavailableError as exc:
            raise AppDatabaseUnavailableError(
                f"{self.description} is unreachable: {_cause(exc)}"
            ) from exc
        except StoreError as exc:
            raise AppDatabaseError(f"{self.description}: {_cause(exc)}") from exc
        try:
            async with step_connector(opened.store).step_transaction("read committed") as conn:
                await conn.run_sync(metadata.create_all)
        except Exception as exc:
            if _classify(opened.store, exc) is Failure.UNAVAILABLE:
                raise AppDatabaseUnavailableError(
                    f"{self.description} is unreachable: {errors.describe(exc)}"
                ) from exc
            if await _has_table(opened.store):
                return  # made by another process at the same moment
            raise AppDatabaseError(
                f"{self.description} has no {OUTPUTS_TABLE} table and could not make it "
                f"({errors.describe(_driver(exc))}): run `durable migrate --app-database URL` "
                "as a user allowed to create tables there"
            ) from exc


class _Opened:
    """An application database's store (its connector) in one event loop."""

    def __init__(self, store: SQLStoreBase) -> None:
        self.store = store
        self.lock = anyio.Lock()
        self.ready = False


class _AppTransaction:
    """One transaction step's transaction on an application database."""

    def __init__(
        self,
        database: AppDatabase,
        store: SQLStoreBase,
        connection: AsyncConnection,
        call: TransactionCall | None,
    ) -> None:
        self.database = database
        self.store = store
        self.connection = connection
        self.call = call

    async def recorded(self) -> str | None:
        """The output a run of the call that committed recorded here, if any."""
        call = self.call
        if call is None:
            return None
        params = {"workflow": call.lease.workflow_id, "path": call.path}
        row = (await self.connection.execute(_RECORDED, params)).first()
        if row is None:
            return None
        if row.step_name != call.name:
            raise StepNameMismatchError(
                f"workflow {call.lease.workflow_id} called transaction step {call.name!r} at "
                f"path {call.path}, but {self.database.description} records "
                f"{row.step_name!r} there. The body must make the same calls in the same "
                "order on every run: move branching into a step.",
                index=call.index,
                path=call.path,
                recorded=row.step_name,
                called=call.name,
            )
        return str(row.output)

    async def record(self, output: str, *, new_try: bool) -> None:
        """Insert the call's record; another run's record there first:
        :class:`TransactionConflictError` (the next try returns that one's output)."""
        call = self.call
        if call is None:
            return
        await self.store.check_values(f"transaction step {call.index}", output)
        row = {
            "workflow_id": call.lease.workflow_id,
            "path": call.path,
            "step_name": call.name,
            "output": output,
            "recorded_at": utcnow(),
        }
        try:
            await self.connection.execute(_RECORD, row)
        except sa.exc.DBAPIError as exc:
            if _classify(self.store, exc) is not Failure.DUPLICATE:
                raise
            raise TransactionConflictError(
                f"transaction step {call.name!r} of workflow {call.lease.workflow_id}: another "
                f"run of the call recorded it first in {self.database.description}; this "
                "run rolled back"
            ) from exc


def _store_for(url: str) -> SQLStoreBase:
    """A (not yet opened) store for ``url``, whose connector the transactions use."""
    store = plugin_manager().hook.durable_store_from_url(url=url.strip())
    if not isinstance(store, SQLStoreBase):
        raise InvalidDatabaseURLError(
            f"AppDatabase({redact(url)!r}): no installed SQL backend accepts this URL "
            "(postgresql://, sqlite:///, mysql://: install durable-core[postgres], [sqlite] "
            "or [mysql])"
        )
    return store


async def _has_table(store: SQLStoreBase) -> bool:
    try:
        async with step_connector(store).step_transaction("read committed") as conn:
            return bool(await conn.run_sync(lambda sync: sa.inspect(sync).has_table(OUTPUTS_TABLE)))
    except Exception:
        return False


_MISSING = ("no such table", "does not exist", "doesn't exist")


def _classify(store: SQLStoreBase | None, exc: BaseException) -> Failure | None:
    """What kind of failure ``exc`` is, by the driver's own rules (``store``'s connector);
    our table missing is :attr:`Failure.SCHEMA_MISSING`."""
    failure = classify_sqlalchemy(exc) if store is None else store.connector.classify(exc)
    text = str(_driver(exc)).lower()
    if failure in (Failure.OTHER, Failure.SCHEMA_MISSING) and OUTPUTS_TABLE in text:
        return Failure.SCHEMA_MISSING if any(m in text for m in _MISSING) else failure
    return failure


def _driver(exc: BaseException) -> BaseException:
    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        return exc.orig.__cause__ or exc.orig
    return exc


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    return errors.describe(cause) if cause is not None else str(exc)


async def close_app_databases() -> None:
    """Close every application database's connections in this event loop (a worker does it
    as it stops)."""
    for database in list(_in_use):
        try:
            await database.close()
        except Exception:  # closing what may be broken: the next use opens again
            continue
