"""What a saga (:mod:`durable_core.primitives.saga`) asks its attempt for: a part of the one
door, :class:`~durable_core.runtime.attempt.Attempt`.

A saga entered at the path ``P`` records ``durable.saga`` there; each compensation
registered in its block is a ``durable.compensate`` call of the branch that registers it
(input ``[P]``, output the compensating step's name and input). Everything the saga does
once its block failed stands under ``P``, outside the branches' numbering, so a replay
finds it whatever the block did: ``P/undo`` (``durable.saga_undo``) keeps why it
compensates, ``P/0``, ``P/1``... are the compensating steps in the order they run, and
``P/end`` (``durable.saga_end``, input ``[P]``) ends the saga: nothing is owed after it
(:mod:`durable_core.sql.compensation` reads the same rows).

A workflow that must stop but owes compensations (its cancel was a request, or its
timeout passed before they ran) is **halted**: its body replays, so each saga finds its
compensations again, and the first call that would do something new raises
:class:`HaltedError` instead, which ends the saga's block; only compensations run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..codec.failures import dump_error, load_error
from ..errors import FrameworkError, StepNameMismatchError
from ..seams.compensation_role import compensations_of
from ..seams.records import ClaimedWorkflow
from ..seams.store import Store
from .journal import Call, Journal
from .step_body import StepBody

T = TypeVar("T")

SAGA = "durable.saga"
COMPENSATE = "durable.compensate"
UNDO = "durable.saga_undo"
END = "durable.saga_end"

compensating: ContextVar[bool] = ContextVar("durable_compensating", default=False)
"""Set while a saga records its end or runs its compensations: they may run in an
attempt that is halted, cancelled or past its deadline."""

halted_saga: ContextVar[str | None] = ContextVar("durable_halted_saga", default=None)
"""In the block of a saga that compensated (or began to) in an earlier attempt: why
(its recorded error JSON). Nothing new runs there."""


class HaltedError(FrameworkError):
    """A workflow body made a new call where nothing new may run: the workflow is being
    cancelled or has timed out while it owes compensations, or the saga around the call
    compensated in an earlier attempt. Its saga ends here and compensates."""

    retryable = False


@dataclass(frozen=True, slots=True)
class Halt:
    """Why an attempt runs only compensations."""

    error: str
    """The error JSON of the cancel or the timeout."""
    timed_out: bool


@dataclass(frozen=True, slots=True)
class SagaRecord:
    """What the journal holds of a saga as it is entered."""

    path: str
    undo: str | None
    """The error JSON it compensated for, when it began to in an earlier attempt."""
    ended: bool
    """Whether its end is recorded (nothing more runs for it)."""


class SagaDoor(Protocol):
    """What :class:`Sagas` uses of the attempt it is part of."""

    store: Store
    claimed: ClaimedWorkflow
    journal: Journal
    replaying: bool
    ending: Any
    failed_step: tuple[int, str] | None
    given_up: list[BaseException]
    halt: Halt | None
    sagas_open: int
    compensated_error: str | None

    async def persist(self, operation: Callable[[], Awaitable[T]]) -> T: ...

    async def effect(
        self,
        name: str,
        input_json: str,
        act: Callable[[Call], Awaitable[str]],
        *,
        records: bool = False,
    ) -> str: ...

    async def _act(
        self,
        call: Call,
        input_json: str,
        act: Callable[[Call], Awaitable[str]],
        *,
        records: bool = False,
    ) -> str: ...

    def _call(
        self, name: str, input_json: str | None = None, *, step: bool = False, at: str | None = None
    ) -> Call: ...

    async def run_step(
        self, step: StepBody, args: tuple[Any, ...], kwargs: Any, *, at: str | None = None
    ) -> Any: ...

    def cancel(self) -> None: ...

    async def _committed(self) -> None: ...

    async def cancel_reason(self) -> str | None: ...


def _output(text: str) -> Any:
    return json.loads(text)


class Sagas:
    """The attempt's saga calls (a part of :class:`~durable_core.runtime.attempt.Attempt`)."""

    failed_step: tuple[int, str] | None = None
    halt: Halt | None = None
    """Set when the attempt runs only compensations."""
    sagas_open: int = 0
    """Sagas entered and not ended in this attempt (while any is, a lease renewal also
    asks whether a cancel was requested)."""
    owing: bool = False
    """A compensation failed: the attempt ends as a failure (retried), not as its cancel
    or timeout, so a later attempt runs the rest."""
    compensated_error: str | None = None
    """The error JSON a cancel or timeout settles with once a saga compensated for it."""

    async def saga_open(self: SagaDoor) -> SagaRecord:
        """Enter a saga at the current branch's next path; what its history holds."""
        path = self.journal.next_path()
        await self.effect(SAGA, "[]", _null)
        if self.halt is None and self.journal.recorded and not self.replaying:
            role = compensations_of(self.store)
            if role is not None:
                workflow_id = self.claimed.id
                requested = await self.persist(lambda: role.cancel_requested(workflow_id))
                if requested is not None:
                    self.halt = Halt(requested, timed_out=False)
        undo = self.journal.recorded_at(f"{path}/undo")
        end = self.journal.recorded_at(f"{path}/end")
        self.sagas_open += 1
        return SagaRecord(
            path,
            undo.output if undo is not None and undo.output is not None else None,
            end is not None and end.output is not None,
        )

    async def saga_register(self: SagaDoor, path: str, step_name: str, input_json: str) -> int:
        """Record the compensation ``step_name(input)`` of the saga at ``path``; its call's
        index (compensations run in the reverse order of their indexes)."""
        call = self._call(COMPENSATE)
        recorded = call.output
        if recorded is not None and _output(recorded).get("step") != step_name:
            self.failed_step = (call.index, COMPENSATE)
            raise StepNameMismatchError(
                f"workflow {self.journal.workflow} registered the compensation {step_name!r} "
                f"at index {call.index}, but its history has {_output(recorded).get('step')!r} "
                "there: the body must register the same compensations on every run",
                index=call.index,
                path=call.path,
                recorded=str(_output(recorded).get("step")),
                called=step_name,
            )
        output = json.dumps({"step": step_name, "input": input_json})
        await self._act(call, json.dumps([path]), lambda _: _text(output))
        await self._committed()  # owed from here, even written behind (a group commit)
        return call.index

    async def saga_mark(self: SagaDoor, path: str, part: str, output: str) -> str:
        """Record the saga's ``undo`` (why it compensates) or ``end`` at ``path/part``, once;
        the recorded output."""
        name = UNDO if part == "undo" else END
        call = self._call(name, at=f"{path}/{part}")
        token = compensating.set(True)
        try:
            return await self._act(call, json.dumps([path]), lambda _: _text(output))
        finally:
            compensating.reset(token)

    async def saga_compensate(
        self: SagaDoor,
        path: str,
        n: int,
        step: StepBody,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Run the saga's ``n``-th compensation (a replay finds it run)."""
        token = compensating.set(True)
        try:
            await self.run_step(step, args, kwargs, at=f"{path}/{n}")
        finally:
            compensating.reset(token)

    async def cancel_reason(self: SagaDoor) -> str | None:
        """The error JSON of the cancel requested of this workflow, if one is."""
        role = compensations_of(self.store)
        if role is None:
            return None
        workflow_id = self.claimed.id
        return await self.persist(lambda: role.cancel_requested(workflow_id))

    async def owes_compensation(self: SagaDoor) -> bool:
        """Whether this workflow's history owes compensations (its store can tell)."""
        role = compensations_of(self.store)
        if role is None:
            return False
        workflow_id = self.claimed.id
        return await self.persist(lambda: role.owes_compensation(workflow_id))

    async def hear_cancel(self: SagaDoor) -> None:
        """While a saga is open, ask whether a cancel was requested (a store that cannot
        announce one); if so, stop the body, which compensates."""
        if not self.sagas_open or self.halt is not None or self.ending is not None:
            return
        if await self.cancel_reason() is not None:
            self.cancel()

    def compensated(self: SagaDoor, original: str, ran: list[str]) -> None:
        """A saga compensated for the cancel or timeout ``original`` (an error JSON): the
        workflow settles with it, saying which compensations ran."""
        record = load_error(original) or {}
        names = ", ".join(ran) or "none"
        record["message"] = f"{record.get('message')}; compensations ran: {names}"
        record["details"] = {"compensations": ran}
        self.compensated_error = dump_error(record)

    def _halted(self: SagaDoor) -> None:
        """Raise :class:`HaltedError` where nothing new may run but compensations."""
        saga = halted_saga.get()
        if self.halt is None and saga is None:
            return
        why = "its saga compensated in an earlier attempt"
        if saga is None:
            why = "it timed out" if self.halt is not None and self.halt.timed_out else "a cancel"
            why = f"{why} stops it and it owes compensations"
        raise HaltedError(
            f"workflow {self.claimed.name} ({self.claimed.id}) runs nothing new: {why}"
        )

    def give_up(self: SagaDoor, exc: BaseException) -> None:
        """``exc`` ends the workflow: no attempt follows it."""
        self.given_up.append(exc)


async def _null(call: Call) -> str:
    return "null"


async def _text(text: str) -> str:
    return text
