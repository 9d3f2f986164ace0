"""Sagas: ``async with saga() as s:`` undoes what a failed block did.

Each step that changes the world registers its compensation as it succeeds, with
:meth:`Saga.compensate`. When the block fails, or its workflow is cancelled or times out,
the compensations run in the reverse order, each a durable step (at least once, never
again once it has succeeded), and the block raises :class:`CompensatedError`, which says
why and which ran. A crash in the middle resumes where it stopped: the body replays, and
the compensations already run are not run again. A cancel of a workflow that owes
compensations lets them run first (``durable_core.sql.compensation``); a timeout runs them
past the deadline. How it is journaled: :mod:`durable_core.runtime.compensation`.

Outside a workflow a saga does the plain thing: the compensations run in the reverse
order when the block raises, with nothing recorded.
"""

from __future__ import annotations

import dataclasses
import json
import math
from contextvars import Token
from types import TracebackType
from typing import Any

import anyio

from ..codec import encode_arguments
from ..codec.failures import dump_error, error_record, load_error
from ..errors import FrameworkError, LeaseLostError, sole_error
from ..runtime.attempt import Attempt
from ..runtime.compensation import HaltedError, SagaRecord, halted_saga
from ..runtime.context import WorkflowContext
from ..runtime.endings import Ending
from ..runtime.flight import shield
from ..runtime.in_step import inside_step
from ..runtime.settling import timeout_error
from .steps import Step


class SagaUsageError(FrameworkError):
    """A saga was used wrongly: :meth:`Saga.compensate` outside its ``async with`` block or
    with something that is not a ``@workflow_step``, a saga entered twice or in a step."""

    retryable = False


class CompensatedError(FrameworkError):
    """A saga's block failed (or its workflow was cancelled or timed out) and its
    compensations ran: ``original`` is what it failed with (an error record: ``type``,
    ``message``...), ``compensations`` the names of the steps that ran, in the order they
    ran. When one of them failed (``failed`` names it), the error can be retried: the
    next attempt runs the rest."""

    retryable = False
    original: dict[str, Any]
    compensations: tuple[str, ...] = ()
    failed: str | None = None

    def __init__(
        self,
        message: str,
        *,
        original: dict[str, Any] | None = None,
        compensations: tuple[str, ...] = (),
        failed: str | None = None,
    ) -> None:
        super().__init__(message)
        self.original = original or {}
        self.compensations = compensations
        self.failed = failed
        self.retryable = failed is not None

    def recorded_details(self) -> dict[str, Any]:
        """What the workflow's recorded error keeps besides the message (its ``details``)."""
        return {
            "original": self.original,
            "compensations": list(self.compensations),
            "failed": self.failed,
        }


@dataclasses.dataclass(slots=True)
class _Owed:
    """One registered compensation."""

    step: Step[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    seq: int
    index: float = math.inf
    """Its call's index in the history (the order registrations happened in)."""


class Saga:
    """A block whose steps register compensations; see :func:`saga`."""

    def __init__(self) -> None:
        self._entered = False
        self._open = False
        self._owed: list[_Owed] = []
        self._run: Attempt | None = None
        self._record: SagaRecord | None = None
        self._halted: Token[str | None] | None = None

    async def __aenter__(self) -> Saga:
        if self._entered:
            raise SagaUsageError("a saga is entered once: use a new saga() for each block")
        ctx = WorkflowContext.current()
        if ctx is not None and inside_step():
            raise SagaUsageError(
                f"saga() works in a workflow body, not inside a step (workflow "
                f"{ctx.workflow_name} {ctx.workflow_id}): open it in the body"
            )
        self._entered = True
        if ctx is not None:
            self._run = ctx.run
            self._record = record = await ctx.run.saga_open()
            if record.undo is not None:  # it compensated before: nothing new runs in it
                self._halted = halted_saga.set(record.undo)
        self._open = True
        return self

    async def compensate(self, undo: Step[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Register ``undo(*args, **kwargs)``, a ``@workflow_step``, to run if the block
        fails; call it as soon as the step it undoes has succeeded. In a workflow the
        registration is recorded: from then on the workflow owes it."""
        if not isinstance(undo, Step):
            raise SagaUsageError(
                f"compensate() takes a @workflow_step, got {undo!r}: declare the "
                "compensation with @workflow_step so that it runs durably"
            )
        if not self._open:
            raise SagaUsageError(
                f"compensate({undo.name!r}) was called outside its saga's block: call it "
                "inside `async with saga() as s:`"
            )
        if inside_step():
            raise SagaUsageError(
                f"compensate({undo.name!r}) works in the workflow body, not inside a step"
            )
        owed = _Owed(undo, args, dict(kwargs), len(self._owed))
        run, record = self._run, self._record
        if run is None or record is None:
            self._owed.append(owed)
            return
        input_json = encode_arguments(
            args, owed.kwargs, what=f"input of compensation {undo.name!r}"
        )
        self._owed.append(owed)  # owed from here: it runs even if the record is cut short
        owed.index = await run.saga_register(record.path, undo.name, input_json)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        if self._halted is not None:
            halted_saga.reset(self._halted)
        run, record = self._run, self._record
        if run is None or record is None:
            await self._plain(exc)
            return
        try:
            await self._exit(run, record, exc)
        finally:
            run.sagas_open -= 1

    async def _exit(self, run: Attempt, record: SagaRecord, exc: BaseException | None) -> None:
        """Leave the saga's block in a workflow: end it, or compensate and raise."""
        if record.undo is None and not self._owed:
            return  # nothing to undo, nothing owed
        if record.undo is None and exc is None:
            await run.saga_mark(record.path, "end", "null")  # nothing is owed any more
            return
        with shield():  # a worker stopping at once cuts it short: the next attempt resumes
            why = await self._why(run, record, exc)
            if why is None:  # the attempt stops (suspended, lease lost, worker stopping)
                return
            original, stopped = why
            original = await run.saga_mark(record.path, "undo", original)
            ran: list[str] = []
            failed: tuple[str, Exception] | None = None
            for n, owed in enumerate(self._order()):
                try:
                    await run.saga_compensate(record.path, n, owed.step, owed.args, owed.kwargs)
                except LeaseLostError:
                    raise
                except Exception as problem:
                    failed = (owed.step.name, problem)
                    break
                ran.append(owed.step.name)
            if failed is None:
                await run.saga_mark(record.path, "end", json.dumps(ran))
        error = _compensated(load_error(original) or {}, ran, failed)
        if failed is None:
            run.give_up(error)
            if stopped:
                run.compensated(original, ran)
        else:
            run.owing = True
        raise error from exc

    def _order(self) -> list[_Owed]:
        """The compensations in the order they run: the last registered first."""
        return sorted(self._owed, key=lambda o: (o.index, o.seq), reverse=True)

    async def _why(
        self, run: Attempt, record: SagaRecord, exc: BaseException | None
    ) -> tuple[str, bool] | None:
        """Why the saga compensates (an error JSON) and whether for a cancel or a timeout;
        ``None`` when it must not (the attempt stops for another reason)."""
        if record.undo is not None:
            return record.undo, run.halt is not None
        if exc is not None:
            exc = sole_error(exc)  # a task group in the block: the error of its one branch
        halt = run.halt
        if halt is not None and (exc is None or isinstance(exc, HaltedError)):
            return halt.error, True
        if exc is None:
            return None
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            if run.ending is Ending.CANCELLED:
                reason = await run.cancel_reason()
                return None if reason is None else (reason, True)
            if run.ending is None and run.past_deadline():
                return timeout_error(run), True
            if halt is not None:
                return halt.error, True
            return None
        if run.ending is Ending.CANCELLED:  # a step cut short by the cancel raised
            reason = await run.cancel_reason()
            if reason is not None:
                return reason, True
        index, name = run.failed_step or (None, None)
        return dump_error(error_record(exc, step_index=index, step_name=name)), False

    async def _plain(self, exc: BaseException | None) -> None:
        """Outside a workflow: run the compensations, last first, when the block raised."""
        if exc is None or not self._owed:
            return
        ran: list[str] = []
        failed: tuple[str, Exception] | None = None
        with anyio.CancelScope(shield=True):
            for owed in self._order():
                try:
                    await owed.step(*owed.args, **owed.kwargs)
                except Exception as problem:
                    failed = (owed.step.name, problem)
                    break
                ran.append(owed.step.name)
        raise _compensated(error_record(exc), ran, failed) from exc


def _compensated(
    original: dict[str, Any], ran: list[str], failed: tuple[str, Exception] | None
) -> CompensatedError:
    what = f"{original.get('type')}: {original.get('message')}"
    done = ", ".join(ran) if ran else "none"
    message = f"saga failed ({what}); compensations ran, last registered first: {done}"
    if failed is not None:
        message += f"; compensation {failed[0]!r} failed ({type(failed[1]).__name__}: "
        message += f"{failed[1]}), the rest did not run yet"
    return CompensatedError(
        message,
        original=original,
        compensations=tuple(ran),
        failed=None if failed is None else failed[0],
    )


def saga() -> Saga:
    """A saga: ``async with saga() as s:``, then ``await s.compensate(undo, *args)`` after
    each step that must be undone if the block fails::

        async with saga() as s:
            car = await book_car(trip)
            await s.compensate(cancel_car, car)
            hotel = await book_hotel(trip)
            await s.compensate(cancel_hotel, hotel)

    If the block raises, or the workflow is cancelled or times out inside it, the
    compensations run durably in the reverse order and the block raises
    :class:`CompensatedError` naming them."""
    return Saga()
