"""When a body whose branches wait suspends: as one workflow, once nothing else runs.

A body may run steps and waits concurrently. A wait that is not over *blocks* its
branch, and the workflow suspends only when every durable call in flight is a
blocked wait: no step runs, no write is under way. Then every blocked wait is
written at once (:meth:`~durable_core.seams.roles.AttemptStore.suspend`), the row is left
``waiting`` on all of them, and the body is cancelled; the first wait to end wakes
the row, and the replay finds each branch's own results. A blocked wait whose end
comes while other branches still run (a sleep's deadline, a message looked for
again every poll interval) goes on in the same attempt.

A branch awaiting something that is not durable (a plain ``anyio.sleep``, a socket
outside a step) is not seen: it is cut short when the other branches suspend, and
its replay starts it again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import anyio
import anyio.lowlevel

from ..seams.records import Wait

_SETTLE_ROUNDS = 3
"""Turns of the event loop a decision to suspend waits for at least, so that branches made
ready by the last call that ended (a gather's next member, a task group's parent) start
their own calls first; then it waits while any branch is still ready to run."""


_READY_ROUNDS = 10_000
"""Turns of the event loop a decision to suspend waits at most for branches that are ready
to run (one that never waits on anything would otherwise hold the workflow forever)."""

_STOP_ROUNDS = 100
"""Turns of the event loop a stopped body's cancellation takes at most to reach a branch
(a task of ``asyncio.gather`` hears it from its parent, a few turns later)."""


class Suspension:
    """The durable calls in flight of one attempt, and the decision to suspend it."""

    def __init__(
        self,
        suspend: Callable[[list[Wait]], Awaitable[bool]],
        clock: Callable[[], datetime],
        poll: float,
        ready: Callable[[], bool] = lambda: False,
    ) -> None:
        self._suspend = suspend
        self._ready = ready
        """Whether a branch of the body other than the calling one is ready to run."""
        """Writes the waits and cancels the body (True), or finds one over (False)."""
        self._clock = clock
        self._poll = poll
        self.busy = 0
        """Durable calls in flight that are not blocked waits."""
        self.blocked: dict[str, Wait] = {}
        """The blocked waits, by path."""
        self._changed: anyio.Event | None = None
        """Set (and dropped) when blocked waits should look again, or one may decide."""
        self._look_again = 0
        """Bumped when every blocked wait should look again (a suspension was refused)."""
        self._considering = False
        """A blocked wait is letting the ready branches run before it decides."""
        self._deciding: anyio.Event | None = None
        """While a suspension is being written: set once it is decided."""
        self.closed = False
        """The body ended: nothing suspends any more."""

    @property
    def deciding(self) -> bool:
        """Whether a suspension is being written (a call beginning waits for it)."""
        return self._deciding is not None

    async def enter(self) -> None:
        """A durable call begins (once any suspension being written is decided)."""
        while self._deciding is not None:
            await self._deciding.wait()
        self.busy += 1

    def leave(self) -> None:
        """A durable call ended."""
        self.busy -= 1
        if self.busy == 0 and self.blocked:
            self._notify()

    def leave_idle(self) -> None:
        """The last durable call in flight ended while waits are blocked: one may decide."""
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def block(self, path: str, wait: Wait) -> None:
        """Block the calling branch, inside its durable call, on ``wait``: return when it
        should look again whether its wait is over (a suspension was refused, its
        deadline or the poll interval came); raise the cancellation of the body when
        the workflow suspends."""
        self.blocked[path] = wait
        self.leave()
        try:
            await self._until_look_again(wait)
            while self._deciding is not None:  # a suspension being written counts it
                await self._deciding.wait()
        finally:
            del self.blocked[path]
            self.busy += 1

    async def _until_look_again(self, wait: Wait) -> None:
        seen = self._look_again
        due = anyio.current_time() + self._poll
        if wait.deadline is not None:
            left = (wait.deadline - self._clock()).total_seconds()
            due = min(due, anyio.current_time() + max(0.0, left))
        while True:
            if not (self.busy or self.closed or self._considering or self._deciding):
                await self._decide()
                if self._look_again != seen:
                    return
                continue
            if self._changed is None:
                self._changed = anyio.Event()
            changed = self._changed
            with anyio.move_on_after(due - anyio.current_time()):
                await changed.wait()
            if self._look_again != seen or anyio.current_time() >= due:
                return

    async def _decide(self) -> None:
        """Suspend on every blocked wait if, once the ready branches had their turn,
        nothing but blocked waits is in flight."""
        self._considering = True
        try:
            for rounds in range(_READY_ROUNDS):
                await anyio.lowlevel.checkpoint()
                if self.busy or self.closed:
                    return
                if rounds >= _SETTLE_ROUNDS and not self._ready():
                    break
        finally:
            self._considering = False
        decided = self._deciding = anyio.Event()
        try:
            suspended = await self._suspend(list(self.blocked.values()))
            if not suspended:
                self._look_again += 1  # a wait ended meanwhile: each looks again
                self._notify()
        finally:
            self._deciding = None
            decided.set()
        if suspended:
            await stopped()


async def stopped() -> None:
    """Wait for the cancellation of a body that was just stopped (its scope cancelled) to
    reach the calling branch, and raise it; a branch it never reaches (a task the body
    left behind) raises one of its own."""
    for _ in range(_STOP_ROUNDS):
        await anyio.lowlevel.checkpoint()
    raise anyio.get_cancelled_exc_class()
