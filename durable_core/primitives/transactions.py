"""Declaring transaction steps: ``@transaction_step``, a step whose database writes happen
exactly once.

Its function takes a SQLAlchemy ``AsyncConnection`` first: the library opens a
transaction on it, runs the function, and records the function's output in that same
transaction, so the writes and the record commit together or not at all. On a replay
the recorded output is returned and the function does not run. See
:mod:`durable_core.runtime.transactions` for how, and the how-to guide "Exactly-once
database writes".
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
)

from ..definitions.registry import qualified_name
from ..definitions.retry import RetryPolicy
from ..errors import RegistrationError, TransactionStepError
from ..runtime.context import WorkflowContext
from ..runtime.in_step import (
    enter_step,
    enter_transaction,
    inside_step,
    leave_step,
    leave_transaction,
    refuse_in_transaction,
)
from ..seams.transactions import (
    ISOLATION_LEVELS,
    IsolationLevel,
    StepDatabase,
    TransactionalStore,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

P = ParamSpec("P")
R = TypeVar("R")


class TransactionStep(Generic[P, R]):
    """A transaction step: inside a workflow, its function runs in a transaction on its
    database (the store's own, or an :class:`~durable_core.AppDatabase`) that also records
    its output, and a replay returns that output; outside one, it runs in a transaction
    with nothing recorded."""

    def __init__(
        self,
        fn: Callable[Concatenate[AsyncConnection, P], Awaitable[R]],
        *,
        name: str,
        database: StepDatabase | None = None,
        isolation: IsolationLevel = "read committed",
        retry: RetryPolicy | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.database = database
        """The database it runs on; ``None``: the store's own."""
        self.isolation: IsolationLevel = isolation
        self.retry = retry
        functools.update_wrapper(self, fn)

    def database_for(self, store: object) -> StepDatabase:
        """The database it runs on: its own, else ``store``'s (which must run transaction
        steps: the SQL stores do)."""
        if self.database is not None:
            return self.database
        if isinstance(store, TransactionalStore):
            return store.step_database()
        description = getattr(store, "description", type(store).__name__)
        raise TransactionStepError(
            f"transaction step {self.name!r} runs on the store's own database, and "
            f"{description} cannot run transaction steps: give it "
            "database=AppDatabase(url)"
        )

    async def run_in(self, connection: AsyncConnection, args: tuple[Any, ...], kwargs: Any) -> R:
        """Run the step's function once on ``connection`` (no transaction of its own)."""
        return await self.fn(connection, *args, **kwargs)

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        refuse_in_transaction(f"transaction step {self.name!r} called")
        ctx = WorkflowContext.current()
        if ctx is None or inside_step():
            return await self._inline(ctx, args, kwargs)
        return cast(R, await ctx.run.transaction_step(self, args, kwargs))

    async def _inline(self, ctx: WorkflowContext | None, args: tuple[Any, ...], kwargs: Any) -> R:
        """Outside a workflow (or inside a plain step): one transaction, nothing recorded."""
        if self.database is None and ctx is None:
            raise TransactionStepError(
                f"transaction step {self.name!r} was called outside a workflow, where there "
                "is no store to run it on: call it from a workflow, or give it "
                "database=AppDatabase(url)"
            )
        database = self.database_for(None if ctx is None else ctx.store)
        try:
            async with database.transaction(None, self.isolation) as transaction:
                token, named = enter_step(), enter_transaction(self.name)
                try:
                    return await self.run_in(transaction.connection, args, kwargs)
                finally:
                    leave_transaction(named)
                    leave_step(token)
        except Exception as exc:
            failure = database.failure(exc)
            if failure is exc:
                raise
            raise failure from exc

    def __repr__(self) -> str:
        return f"<transaction_step {self.name}>"


class TransactionDecorator(Protocol):
    """What ``@transaction_step(...)`` with options returns: it keeps the function's types."""

    def __call__(
        self, fn: Callable[Concatenate[AsyncConnection, P], Awaitable[R]], /
    ) -> TransactionStep[P, R]: ...


@overload
def transaction_step(
    fn: Callable[Concatenate[AsyncConnection, P], Awaitable[R]], /
) -> TransactionStep[P, R]: ...


@overload
def transaction_step(
    *,
    database: StepDatabase | None = None,
    isolation: IsolationLevel = "read committed",
    retry: RetryPolicy | None = None,
    name: str | None = None,
) -> TransactionDecorator: ...


def transaction_step(
    fn: Callable[Concatenate[AsyncConnection, P], Awaitable[Any]] | None = None,
    /,
    *,
    database: StepDatabase | None = None,
    isolation: IsolationLevel = "read committed",
    retry: RetryPolicy | None = None,
    name: str | None = None,
) -> TransactionStep[P, Any] | TransactionDecorator:
    """Declare a transaction step: an ``async def`` taking a SQLAlchemy ``AsyncConnection``
    first, then its own arguments (callers pass those only). Its database writes on that
    connection and its recorded output commit in one transaction, so they happen exactly
    once: a crash keeps both or neither, and a replay returns the output without running
    it.

    ``database`` is an :class:`~durable_core.AppDatabase` (default: the store's own
    database, where the record is the step's row). ``isolation`` is ``"read committed"``
    (the default), ``"repeatable read"`` or ``"serializable"``; a serialization failure or
    a deadlock rolls the try back and runs it again, however many times it takes.
    ``retry`` retries the body's own errors as a plain step's policy does. The body may
    make no durable call (a step, ``sleep``, ``recv``, a child start...):
    :class:`~durable_core.errors.TransactionStepError`."""
    if isolation not in ISOLATION_LEVELS:
        raise RegistrationError(
            f"@transaction_step isolation must be one of {', '.join(ISOLATION_LEVELS)}, "
            f"got {isolation!r}"
        )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise RegistrationError(f"retry must be a RetryPolicy, got {retry!r}")
    if database is not None and not callable(getattr(database, "transaction", None)):
        raise RegistrationError(
            f"@transaction_step database must be an AppDatabase, got {database!r}"
        )

    def decorate(
        func: Callable[Concatenate[AsyncConnection, P], Awaitable[Any]],
    ) -> TransactionStep[P, Any]:
        if not inspect.iscoroutinefunction(func):
            raise RegistrationError(
                f"@transaction_step {qualified_name(func)} must be an async def taking the "
                "connection first"
            )
        return TransactionStep(
            func,
            name=name or qualified_name(func),
            database=database,
            isolation=isolation,
            retry=retry,
        )

    return cast(TransactionDecorator, decorate) if fn is None else decorate(fn)
