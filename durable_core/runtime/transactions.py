"""A body's transaction step, through its attempt: its body's database writes and its
record in one transaction (:mod:`durable_core.seams.transactions`), so they happen once.

The step's row in the store lives as a plain step's does (a try begins, a long one shows
a ``running`` row, a failure is recorded and retried by the step's policy), with one
difference: its success is the commit of the transaction that holds its record. On the
store's own database that record *is* the row (its end is written in the transaction,
never by the group commit, and a running row the group commit carries lands before it);
on another database the row follows the commit, written behind like a plain step's end,
and a replay that has no row finds the record there. Without a group commit a try writes
no running row first (a commit of its own): only a failed try writes one, to fail it.

Every write before the step has committed when its transaction begins, and nothing after
it starts before that transaction committed; it does not wait for a group-commit flush
to make its own writes durable. A conflict (a serialization failure, a deadlock, another
run recording first) is retried at once with a short backoff, however many times, as a
try of the step that failed; the step's policy retries the body's own errors.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
import anyio.lowlevel

from ..codec import decode, encode
from ..definitions.retry import RetryPolicy
from ..errors import (
    FrameworkError,
    LeaseLostError,
    StoreUnavailableError,
    TransactionConflictError,
)
from ..seams.plugins import observers, observing
from ..seams.records import ClaimedWorkflow, Lease
from ..seams.store import AttemptStore, Store
from ..seams.transactions import IsolationLevel, StepDatabase, TransactionCall
from .endings import Ending
from .group_commit import GroupCommit
from .in_step import enter_step, enter_transaction, leave_step, leave_transaction
from .journal import NEW, Call, Journal

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from ..seams.events import AttemptEvent

T = TypeVar("T")

CONFLICT_BACKOFF = RetryPolicy(
    max_attempts=1, initial_interval=0.002, backoff_coefficient=2.0, max_interval=1.0, jitter=0.5
)
"""How long a transaction step waits before it runs again after a conflict (only its
delays are read: a conflict is retried however many times it takes)."""


class TransactionBody(Protocol):
    """What the attempt runs of a transaction step (a
    :class:`~durable_core.primitives.transactions.TransactionStep`)."""

    @property
    def name(self) -> str: ...

    @property
    def retry(self) -> RetryPolicy | None: ...

    @property
    def isolation(self) -> IsolationLevel: ...

    def database_for(self, store: object) -> StepDatabase:
        """The database it runs on (``store``'s own unless it names another)."""
        ...

    async def run_in(self, connection: AsyncConnection, args: tuple[Any, ...], kwargs: Any) -> Any:
        """Run the step's function once on ``connection``."""
        ...


class Door(Protocol):
    """What :class:`Transactions` uses of the attempt it is part of."""

    store: Store
    group: GroupCommit | None
    writes: AttemptStore
    lease: Lease
    claimed: ClaimedWorkflow
    journal: Journal
    clock: Callable[[], datetime]
    ending: Ending | None
    replaying: bool
    failed_step: tuple[int, str] | None
    given_up: list[BaseException]
    lease_deadline: float

    @property
    def event(self) -> AttemptEvent: ...

    async def persist(self, operation: Callable[[], Awaitable[T]]) -> T: ...

    async def past_history(self) -> None: ...

    async def _enter(self, call: Call) -> None: ...

    def _leave(self, call: Call) -> None: ...

    async def _committed(self) -> None: ...

    async def _step_failed(self, call: Call, exc: Exception) -> None: ...

    def _step_input(self, call: Call, args: tuple[Any, ...], kwargs: Any) -> tuple[str, Any]: ...

    async def _first_try(self, call: Call, input_json: str) -> int: ...

    async def _next_try(
        self,
        call: Call,
        input_json: str,
        policy: RetryPolicy | None,
        error: BaseException,
        tries: int,
    ) -> None: ...

    def _replayed(self, call: Call) -> None: ...

    def _recorded(self, call: Call) -> None: ...

    def end(self, ending: Ending) -> None: ...


class Transactions:
    """The attempt's transaction steps (a part of
    :class:`~durable_core.runtime.attempt.Attempt`)."""

    failed_step: tuple[int, str] | None

    async def transaction_step(
        self: Door, step: TransactionBody, args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        """Run the transaction step ``step`` durably: its recorded output on a replay (from
        the store, or from its database's record), else its body and its record in one
        transaction, retried on a conflict and by its policy."""
        call = self.journal.call(step.name)
        input_json, value = self._step_input(call, args, kwargs)
        if value is not NEW:
            return value
        try:
            database = step.database_for(self.store)
        except FrameworkError:
            self.failed_step = (call.index, step.name)
            raise
        if self.replaying:
            await self.past_history()
        await self._enter(call)
        try:
            conflicts = 0
            tries = await self._first_try(call, input_json)
            # A record of the call may have committed unseen: on another database, in any
            # run; on the store's, only in a try of this attempt whose end was not known.
            check = not database.records_steps
            group = self.group
            lease = self.lease

            async def begin() -> None:
                await self.persist(
                    lambda: self.writes.start_step(
                        lease, call.index, call.name, input_json, path=call.stored_path
                    )
                )

            # Without a group commit a try writes no running row first (a commit of its own):
            # the transaction writes the row on the store's own database, one write after it
            # does elsewhere, and a failed try writes one to fail it.
            late = group is None
            rowed = call.recorded is not None
            while True:
                await self._committed()  # what it read of earlier steps is theirs for good
                if not late and (
                    self.ending is not None
                    or group is None
                    or not group.began_now(
                        lease, call.index, call.name, input_json, call.stored_path
                    )
                ):
                    await begin()
                if observing():
                    observers().durable_step_started(
                        attempt=self.event,
                        step_index=call.index,
                        step_name=call.name,
                        step_attempt=tries,
                    )
                token, named = enter_step(), enter_transaction(step.name)
                about = TransactionCall(lease, call.index, call.name, input_json, call.path, check)
                try:
                    async with database.transaction(about, step.isolation) as transaction:
                        output = await transaction.recorded()
                        if output is None:
                            result = await step.run_in(transaction.connection, args, kwargs)
                            output = encode(
                                result, what=f"output of step {step.name!r} (index {call.index})"
                            )
                            # On the store's own database the record is the step's row: a
                            # try whose running row a flush wrote (waited for here, so it
                            # cannot land after) is counted there already.
                            written = (
                                database.records_steps
                                and group is not None
                                and await group.writes_elsewhere(lease, call.index)
                            )
                            await transaction.record(output, new_try=not written)
                        else:
                            result = decode(output, what=f"recorded output of {step.name!r}")
                except LeaseLostError:
                    self.end(Ending.LEASE_LOST)
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    raise
                except Exception as exc:
                    failure = database.failure(exc)
                    if late:
                        await begin()
                        rowed = True
                    await self._step_failed(call, failure)
                    check = True  # a try that failed as it committed may have committed
                    if isinstance(failure, TransactionConflictError) or (
                        isinstance(failure, StoreUnavailableError)
                        and time.monotonic() < self.lease_deadline
                    ):
                        conflicts += 1
                        await anyio.sleep(CONFLICT_BACKOFF.delay(conflicts))
                        tries += 1
                        continue
                    if failure is not exc:
                        failure.__cause__ = exc
                    await self._next_try(call, input_json, step.retry, failure, tries)
                    tries += 1
                    continue
                finally:
                    leave_transaction(named)
                    leave_step(token)
                self.failed_step = None
                if database.records_steps:
                    if group is not None:
                        group.ended_elsewhere(lease, call.index)
                elif late and not rowed:  # the step's first row: its one write
                    record = functools.partial(
                        self.writes.record_step,
                        lease,
                        call.index,
                        call.name,
                        input_json,
                        output,
                        path=call.stored_path,
                    )
                    await self.persist(record)
                else:
                    if late:
                        await begin()  # counts this try on the row an earlier one left
                    if (
                        self.ending is not None
                        or group is None
                        or not group.completed_now(lease, call.index, output)
                    ):
                        await self.persist(
                            functools.partial(self.writes.complete_step, lease, call.index, output)
                        )
                self._recorded(call)
                return result
        finally:
            self._leave(call)
