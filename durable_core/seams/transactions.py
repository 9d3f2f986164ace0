"""The seam under transaction steps: a database that runs a step's body and its record in
one transaction.

A transaction step (:func:`durable_core.transaction_step`) hands its body a SQLAlchemy
``AsyncConnection`` in a transaction and records the body's output **in that same
transaction**, so the body's writes and the record commit together or not at all. Two
kinds of database do it (both in :mod:`durable_core.sql`):

- the store's own database (:class:`TransactionalStore`): the record is the step's row of
  ``workflow_steps``, fenced by the lease like every step write;
- another database (:class:`durable_core.AppDatabase`): the record is a row of a small
  table of ours there, and the store's step row follows it; on a replay that finds the
  first and not the second, the first wins.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, get_args, runtime_checkable

from .records import Lease

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

IsolationLevel = Literal["read committed", "repeatable read", "serializable"]
"""A transaction step's isolation level (SQLite's transactions are always serializable)."""

ISOLATION_LEVELS: tuple[str, ...] = get_args(IsolationLevel)


@dataclass(frozen=True, slots=True)
class TransactionCall:
    """The call of a transaction step whose record a transaction writes."""

    lease: Lease
    index: int
    name: str
    input: str
    path: str
    """The call's path in its workflow's journal (the app record's key: a path, unlike an
    index, is the same in every run)."""
    check: bool
    """Look for a record of the call before running the body (a run whose outcome is not
    known may have committed it)."""


class StepTransaction(Protocol):
    """One transaction of a transaction step: its connection, and the call's record."""

    @property
    def connection(self) -> AsyncConnection:
        """The connection the body does its work on, in the transaction."""
        ...

    async def recorded(self) -> str | None:
        """The output JSON recorded for the call by a run that committed, if any (looked for
        only when the call's ``check`` asks)."""
        ...

    async def record(self, output: str, *, new_try: bool) -> None:
        """Record ``output`` as the call's, in the transaction; ``new_try``: the store's step
        row counts one more try (no running row of this try was written). Refused:
        :class:`~durable_core.errors.LeaseLostError` or
        :class:`~durable_core.errors.TransactionConflictError`, and it all rolls back."""
        ...


class StepDatabase(Protocol):
    """A database transaction steps run on."""

    @property
    def description(self) -> str:
        """The database, with no credential in it."""
        ...

    @property
    def records_steps(self) -> bool:
        """Whether the record is the store's step row itself (the store's own database)."""
        ...

    def transaction(
        self, call: TransactionCall | None, isolation: IsolationLevel
    ) -> AbstractAsyncContextManager[StepTransaction]:
        """A transaction at ``isolation``, committed when the block ends without error
        (``call``: ``None`` outside a workflow, where nothing is recorded)."""
        ...

    def failure(self, exc: Exception) -> Exception:
        """What ``exc``, raised in a transaction, is to the step: a conflict
        (:class:`~durable_core.errors.TransactionConflictError`), the database unreachable,
        or ``exc`` itself (the body's own error)."""
        ...


@runtime_checkable
class TransactionalStore(Protocol):
    """A store that runs transaction steps on its own database."""

    def step_database(self) -> StepDatabase:
        """Its database, for transaction steps."""
        ...
