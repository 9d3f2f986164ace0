"""Transaction steps on a SQL store's own database, and what every SQL database's conflict
looks like.

On the store's own database a transaction step's record is its row of ``workflow_steps``,
written by the step-row rule (:func:`~durable_core.sql.rules.put_step`, fenced by the
lease) in the transaction that ran the body: the body's writes and the row commit
together, and a worker that lost its lease commits neither. Under ``read committed`` that
fenced write is the only fence (it reads the workflow row afresh); under a stricter level
the transaction first locks the workflow row for share, so that its snapshot holds the
row as the lease has it and a renewal of the lease waits for the commit instead of
failing it as a conflict.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import (
    FrameworkError,
    StoreUnavailableError,
    TransactionConflictError,
    TransactionStepError,
)
from ..seams.records import StepStatus
from ..seams.transactions import IsolationLevel, TransactionCall
from . import errors
from .dialect import const
from .errors import Failure
from .rules import holds, param, st, wf

if TYPE_CHECKING:
    from .base import SQLStoreBase

SHARE_FENCE = sa.select(wf.c.id).where(holds()).with_for_update(read=True)
"""The workflow row, locked for share while the lease holds it (else no row)."""

STEP_OUTPUT = sa.select(st.c.output).where(
    st.c.workflow_id == param("workflow"),
    st.c.step_index == param("index"),
    st.c.status == const(StepStatus.SUCCEEDED.value),
)
"""A step row's output, once it succeeded."""

_CONFLICT_STATES = frozenset({"40001", "40P01"})
"""SQLSTATEs of a serialization failure and a deadlock (PostgreSQL)."""
_CONFLICT_CODES = frozenset({1213, 1020})
"""MySQL/MariaDB: a deadlock, a record changed since a snapshot read it."""
_SQLITE_BUSY = frozenset({5, 6})
"""SQLite: the database (or a table) is locked by another connection."""


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's exception, as SQLAlchemy raises it or bare) is a
    transaction rolled back for another's sake: worth running again."""
    driver = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    for candidate in (driver, driver.__cause__):
        state = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if state in _CONFLICT_STATES:
            return True
    code = getattr(driver, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_BUSY
    args: tuple[Any, ...] = getattr(driver, "args", ())
    return bool(args) and isinstance(args[0], int) and args[0] in _CONFLICT_CODES


def conflict_error(exc: BaseException, where: str) -> TransactionConflictError:
    """The error a transaction step's try ends with when ``exc`` was a conflict on ``where``."""
    return TransactionConflictError(
        f"transaction on {where} rolled back by a conflict with another transaction, "
        f"nothing written (the step runs again): {errors.describe(_driver(exc))}"
    )


def _driver(exc: BaseException) -> BaseException:
    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        return exc.orig.__cause__ or exc.orig
    return exc


class StepConnector(Protocol):
    """A connector that opens transactions for transaction steps (SQLAlchemy's, asyncpg's)."""

    def step_transaction(self, isolation: str) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection in a transaction at ``isolation``."""
        ...


def step_connector(store: SQLStoreBase) -> StepConnector:
    """The store's connector, if it opens transactions for transaction steps."""
    connector: Any = store.connector
    if not callable(getattr(connector, "step_transaction", None)):
        raise TransactionStepError(
            f"{store.description} cannot run transaction steps: its connector "
            f"({type(connector).__name__}) has no step_transaction(); give the step an "
            "AppDatabase"
        )
    return connector  # type: ignore[no-any-return]


class StoreTransactions:
    """Transaction steps on a SQL store's own database (a
    :class:`~durable_core.seams.transactions.StepDatabase`): the record is the step's row."""

    records_steps = True

    def __init__(self, store: SQLStoreBase) -> None:
        self.store = store

    @property
    def description(self) -> str:
        """The store's database."""
        return self.store.description

    @asynccontextmanager
    async def transaction(
        self, call: TransactionCall | None, isolation: IsolationLevel
    ) -> AsyncIterator[_StoreTransaction]:
        """A transaction on the store's database at ``isolation``, fenced by ``call``'s lease
        (see the module's docs)."""
        self.store._require_open()
        async with (
            translated(self.failure) as body,
            step_connector(self.store).step_transaction(isolation) as conn,
        ):
            transaction = _StoreTransaction(self.store, conn, call)
            if call is not None and isolation != "read committed":
                await transaction.fence()
            async with body():
                yield transaction

    def failure(self, exc: Exception, *, ours: bool = False) -> Exception:
        """A conflict as :class:`TransactionConflictError`, the database out of reach as
        :class:`StoreUnavailableError`, anything else as it is. An exception not raised
        by the database (``ours``: raised connecting or committing) is the body's own."""
        if isinstance(exc, FrameworkError):
            return exc
        if is_conflict(exc):
            return conflict_error(exc, self.description)
        if from_database(exc, ours) and self.store.connector.classify(exc) is Failure.UNAVAILABLE:
            return StoreUnavailableError(
                f"transaction step on {self.description}: database unavailable: "
                f"{errors.describe(_driver(exc))}"
            )
        return exc


def from_database(exc: Exception, ours: bool) -> bool:
    """Whether ``exc`` came from the database: raised by SQLAlchemy (a statement of the
    body's, or of ours), or by anything while connecting or committing (``ours``)."""
    return ours or isinstance(exc, sa.exc.SQLAlchemyError)


@asynccontextmanager
async def translated(
    failure: Callable[..., Exception],
) -> AsyncIterator[Callable[[], AbstractAsyncContextManager[None]]]:
    """Raise what fails in the block as ``failure(exc, ours=True)`` says, except what fails
    inside its ``body()`` block (the step's body and the record), raised as it is."""
    raised: list[BaseException] = []

    @asynccontextmanager
    async def body() -> AsyncIterator[None]:
        try:
            yield
        except BaseException as exc:
            raised.append(exc)
            raise

    try:
        yield body
    except Exception as exc:
        if raised and exc is raised[-1]:
            raise
        error = failure(exc, ours=True)
        if error is exc:
            raise
        raise error from exc


class _StoreTransaction:
    """One transaction step's transaction on the store's database."""

    def __init__(
        self, store: SQLStoreBase, connection: AsyncConnection, call: TransactionCall | None
    ) -> None:
        self.store = store
        self.connection = connection
        self.call = call

    def _params(self, call: TransactionCall) -> dict[str, Any]:
        return {"workflow": call.lease.workflow_id, "token": call.lease.token, "index": call.index}

    async def fence(self) -> None:
        """Lock the workflow row for share while the lease holds it, else
        :class:`~durable_core.errors.LeaseLostError`."""
        call = self.call
        assert call is not None
        found = await self.connection.execute(SHARE_FENCE, self._params(call))
        if found.first() is None:
            raise errors.lease_lost(call.lease, f"transaction step {call.index} ({call.name})")

    async def recorded(self) -> str | None:
        """The step row's output when a run whose outcome was not known committed it."""
        call = self.call
        if call is None or not call.check:
            return None
        found = await self.connection.execute(STEP_OUTPUT, self._params(call))
        return found.scalar()

    async def record(self, output: str, *, new_try: bool) -> None:
        """Write the step's row as succeeded with ``output``, fenced by the lease (``new_try``:
        counted as one more try)."""
        call = self.call
        if call is None:
            return
        store = self.store
        await store.check_values(f"transaction step {call.index}", call.input, output)
        q = store.statements
        params = {
            **self._params(call),
            "step_name": call.name,
            "input": call.input,
            "output_json": output,
            "path": None if call.path == str(call.index) else call.path,
        }
        statement = q.record_step_try if new_try else q.record_step
        written = await self.connection.execute(statement, store.dialect.bind_clock(params))
        if not written.rowcount:
            raise errors.lease_lost(call.lease, f"transaction step {call.index} ({call.name})")
