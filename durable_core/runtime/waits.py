"""The attempt's durable waits: sleeps, messages and children, each a call through the
door that blocks its branch until it is over or its deadline passes, and suspends the
workflow once nothing else runs (a part of :class:`~durable_core.runtime.attempt.Attempt`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from ..seams.records import Lease, StepStatus, Wait, WaitKind
from ..seams.store import AttemptStore
from .journal import Call
from .suspension import Suspension

T = TypeVar("T")


class WaitDoor(Protocol):
    """What :class:`Waits` uses of the attempt it is part of."""

    writes: AttemptStore
    lease: Lease
    clock: Callable[[], datetime]
    calls: Suspension
    replaying: bool

    async def persist(self, operation: Callable[[], Awaitable[T]]) -> T: ...

    def _call(
        self, name: str, input_json: str | None = None, *, step: bool = False, at: str | None = None
    ) -> Call: ...

    def _replayed(self, call: Call) -> None: ...

    def _recorded(self, call: Call) -> None: ...

    async def _record(self, call: Call, input_json: str, output: str) -> None: ...

    async def _enter(self, call: Call) -> None: ...

    async def past_history(self) -> None: ...

    def _leave(self, call: Call) -> None: ...

    async def wait(
        self,
        name: str,
        input_json: str,
        *,
        kind: WaitKind,
        key: str,
        until: timedelta | datetime | None,
        over: Callable[[Call], Awaitable[str | None]],
        timed_out: Callable[[datetime], str],
    ) -> str: ...


def _instant(value: datetime | None) -> str:
    return json.dumps(None if value is None else value.isoformat())


def _parse_instant(text: str | None) -> datetime | None:
    value = json.loads(text) if text else None
    return None if value is None else datetime.fromisoformat(value)


class Waits:
    """The attempt's durable waits (a part of :class:`~durable_core.runtime.attempt.Attempt`)."""

    async def wait(
        self: WaitDoor,
        name: str,
        input_json: str,
        *,
        kind: WaitKind,
        key: str,
        until: timedelta | datetime | None,
        over: Callable[[Call], Awaitable[str | None]],
        timed_out: Callable[[datetime], str],
    ) -> str:
        """Wait at this call site until ``over(call)`` returns the output (having recorded
        it) or the deadline passes (recording ``timed_out(deadline)``). In between the
        branch blocks; once nothing else runs, the workflow suspends.

        The deadline (``until``, or ``until`` from the attempt's clock) is fixed the first
        time the call runs and kept in its waiting row, so a replay waits for the same
        moment.
        """
        call = self._call(name)
        if call.output is not None:
            self._replayed(call)
            return call.output
        if self.replaying:
            await self.past_history()
        recorded = call.recorded
        if recorded is not None and recorded.status is StepStatus.WAITING:
            deadline = _parse_instant(recorded.output)
        else:
            deadline = self.clock() + until if isinstance(until, timedelta) else until
        await self._enter(call)
        try:
            while True:
                result = await over(call)
                if result is not None:
                    return result
                if deadline is not None and self.clock() >= deadline:
                    output = timed_out(deadline)
                    await self._record(call, input_json, output)
                    return output
                wait = Wait(
                    kind,
                    key,
                    deadline,
                    call.index,
                    name,
                    input_json,
                    step_output=_instant(deadline),
                    step_path=call.stored_path,
                )
                await self.calls.block(call.path, wait)
        finally:
            self._leave(call)

    async def sleep(self: WaitDoor, input_json: str, until: timedelta | datetime) -> None:
        """A durable sleep: over at its deadline only."""
        await self.wait(
            "durable.sleep",
            input_json,
            kind=WaitKind.SLEEP,
            key="",
            until=until,
            over=_never,
            timed_out=lambda deadline: json.dumps(deadline.isoformat()),
        )

    async def recv(self: WaitDoor, topic: str, until: timedelta | None) -> str:
        """The next message on ``topic`` (its payload JSON), or ``"null"`` at the deadline."""
        name, input_json = "durable.recv", json.dumps([topic])

        async def over(call: Call) -> str | None:
            payload = await self.persist(
                lambda: self.writes.receive(
                    self.lease, topic, call.index, name, input_json, path=call.stored_path
                )
            )
            if payload is not None:
                self._recorded(call)
            return payload

        return await self.wait(
            name,
            input_json,
            kind=WaitKind.MESSAGE,
            key=topic,
            until=until,
            over=over,
            timed_out=lambda deadline: "null",
        )

    async def join(
        self: WaitDoor,
        child_id: str,
        until: timedelta | None,
        look: Callable[[], Awaitable[str | None]],
    ) -> str:
        """Wait for the child ``child_id`` to settle: ``look()`` reads its outcome JSON
        (``None`` while it runs); ``"null"`` at the deadline."""
        name, input_json = "durable.wait", json.dumps([child_id])

        async def over(call: Call) -> str | None:
            output = await look()
            if output is not None:
                await self._record(call, input_json, output)
            return output

        return await self.wait(
            name,
            input_json,
            kind=WaitKind.CHILD,
            key=child_id,
            until=until,
            over=over,
            timed_out=lambda deadline: "null",
        )


async def _never(call: Call) -> None:
    """A wait that only its deadline ends (a sleep)."""
    return None
