"""``InFlight``: the tasks a worker runs its claimed workflows in.

Each claimed workflow runs in a plain asyncio task, inside an anyio cancel scope of its
own: an anyio task group's task costs about four times as much to start and run (a
handle, a wrapper coroutine and a scope of its own per task), once per workflow on the
hot path. The scopes keep anyio's cancellation: abandoning the workflows cancels their
scopes, so shielded clean-up still runs and the executor tells the worker's own
cancellation from a body's.

What must not be cut short by a body's cancellation but must not hold up a worker that
stops at once (a saga's compensations, a group-commit flush) runs in a :func:`shield`:
:meth:`InFlight.abandon` lets the cancellation into it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Self, TypeVar

import anyio

T = TypeVar("T")

_current: ContextVar[InFlight | None] = ContextVar("durable_in_flight", default=None)
"""The :class:`InFlight` whose task (or a task that task started) is running."""


@contextmanager
def shield() -> Iterator[anyio.CancelScope]:
    """A scope shielded from the cancellation around it (a body's cancel or timeout) but
    not from the worker abandoning its in-flight workflows (:meth:`InFlight.abandon`),
    which cancels what runs in it. Outside a worker's workflow, a plain shield."""
    flight = _current.get()
    if flight is None:
        with anyio.CancelScope(shield=True) as scope:
            yield scope
        return
    with anyio.CancelScope(shield=not flight.abandoned) as scope:
        flight._shields.add(scope)
        try:
            yield scope
        finally:
            flight._shields.discard(scope)


class InFlight:
    """The worker's in-flight attempts: started one task each, awaited all together when
    the ``async with`` block is left, as an anyio task group's exit does (when the block
    raised, or the wait is cancelled, each is cancelled first)."""

    def __init__(self, on_failure: Callable[[BaseException], None]) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._scopes: set[anyio.CancelScope] = set()
        self._idle: asyncio.Event | None = None
        self._on_failure = on_failure
        """Told of an error a task let escape (not an :class:`Exception`: those are the
        task's own to handle); :meth:`wait` raises the first."""
        self._failure: BaseException | None = None
        self._cancelled = False
        self.abandoned = False
        """:meth:`abandon` was called: a :func:`shield` opened now shields nothing."""
        self._shields: set[anyio.CancelScope] = set()
        """The :func:`shield` scopes open in the tasks."""

    def __len__(self) -> int:
        return len(self._tasks)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.wait()
            return
        self.cancel()
        with anyio.CancelScope(shield=True):
            await self._all_ended()

    def start(self, run: Callable[[T], Awaitable[None]], item: T) -> None:
        """Run ``run(item)`` in a task of its own."""
        task = asyncio.get_running_loop().create_task(self._scoped(run, item))
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    async def _scoped(self, run: Callable[[T], Awaitable[None]], item: T) -> None:
        _current.set(self)
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            if self._cancelled:  # cancelled before this task first ran
                scope.cancel()
            try:
                await run(item)
            finally:
                self._scopes.discard(scope)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            error = task.exception()
            if error is not None and self._failure is None:
                self._failure = error
                self._on_failure(error)
        if not self._tasks and self._idle is not None:
            self._idle.set()

    def cancel(self) -> None:
        """Cancel every task (anyio's cancellation, through its scope), those that have not
        run yet included."""
        self._cancelled = True
        for scope in list(self._scopes):
            scope.cancel()

    def abandon(self) -> None:
        """Cancel every task (as :meth:`cancel`), what runs in their :func:`shield` scopes
        included: nothing they run holds up the worker's end."""
        self.abandoned = True
        self.cancel()
        for scope in list(self._shields):
            scope.shield = False  # the cancelled scope around it reaches in

    async def wait(self) -> None:
        """Return once every task has ended; cancelled meanwhile, cancel them all and wait
        for them first. Raises the first error a task let escape."""
        try:
            await self._all_ended()
        except BaseException:
            self.cancel()
            with anyio.CancelScope(shield=True):
                await self._all_ended()
            raise
        if self._failure is not None:
            raise self._failure

    async def _all_ended(self) -> None:
        while self._tasks:
            self._idle = asyncio.Event()
            await self._idle.wait()
