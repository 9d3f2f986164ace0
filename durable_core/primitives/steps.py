"""Declaring steps: ``@workflow_step`` and the caching rules that make replay work."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, cast, overload

import anyio.to_thread

from .. import durations
from ..definitions.registry import declared_timeout, qualified_name
from ..definitions.retry import RetryPolicy
from ..errors import RegistrationError, StepTimeoutError
from ..runtime.context import WorkflowContext
from ..runtime.in_step import inside_step, refuse_in_transaction

P = ParamSpec("P")
R = TypeVar("R")


class Step(Generic[P, R]):
    """A step: inside a workflow its output is persisted and replayed from cache;
    outside one it runs inline with no persistence."""

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        *,
        name: str,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.retry = retry
        self.timeout = timeout
        self.is_async = inspect.iscoroutinefunction(fn)
        self.direct: Callable[..., Awaitable[Any]] | None = (
            cast("Callable[..., Awaitable[Any]]", fn) if self.is_async and timeout is None else None
        )
        """The function itself when awaiting it is all :meth:`run_body` does (an ``async
        def`` with no timeout): the attempt awaits it without two coroutines around it."""
        functools.update_wrapper(self, fn)

    async def run_body(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the step's function once, bounded by its timeout (no persistence)."""
        if self.timeout is None:
            return await self._call(*args, **kwargs)
        with anyio.move_on_after(self.timeout) as scope:
            return await self._call(*args, **kwargs)
        # Only the deadline lands here; a TimeoutError of the body's own propagates as is.
        assert scope.cancelled_caught
        raise StepTimeoutError(f"step {self.name!r} ran longer than its timeout of {self.timeout}s")

    async def _call(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.is_async:
            # String casts: subscripting typing.Callable at run time costs ~1 us a call.
            return await cast("Callable[P, Awaitable[R]]", self.fn)(*args, **kwargs)
        call = functools.partial(cast("Callable[P, R]", self.fn), *args, **kwargs)
        # A thread cannot be interrupted: on a timeout or a cancel it is left to finish on
        # its own, and its result is ignored.
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        ctx = WorkflowContext.current()
        if ctx is None or inside_step():
            refuse_in_transaction(f"step {self.name!r} called")
            return await self.run_body(*args, **kwargs)
        return cast(R, await ctx.run.run_step(self, args, kwargs))

    def __repr__(self) -> str:
        return f"<workflow_step {self.name}>"


class StepDecorator(Protocol):
    """What ``@workflow_step(...)`` with options returns: it keeps the function's types."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Step[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Step[P, R]: ...


@overload
def workflow_step(fn: Callable[P, Awaitable[R]], /) -> Step[P, R]: ...


@overload
def workflow_step(fn: Callable[P, R], /) -> Step[P, R]: ...


@overload
def workflow_step(
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
) -> StepDecorator: ...


def workflow_step(
    fn: Callable[P, Any] | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
) -> Step[P, Any] | StepDecorator:
    """Declare a step. An ``async def`` runs on the event loop; a plain ``def`` in a worker
    thread. Either way, callers ``await`` it. ``name`` defaults to ``module.qualname``.

    ``retry`` retries a failing step inside the same attempt, without replaying the
    body; when the policy gives up, the workflow fails. ``timeout`` cancels a body
    that runs longer (a :class:`~durable_core.errors.StepTimeoutError`, retried by
    the policy)."""
    seconds = declared_timeout(timeout, "@workflow_step timeout")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise RegistrationError(f"retry must be a RetryPolicy, got {retry!r}")

    def decorate(func: Callable[P, Any]) -> Step[P, Any]:
        return Step(func, name=name or qualified_name(func), retry=retry, timeout=seconds)

    # decorate is generic in what it decorates; mypy binds its P to this call's.
    return cast(StepDecorator, decorate) if fn is None else decorate(fn)


@contextmanager
def cleanup(seconds: float = 5.0) -> Iterator[anyio.CancelScope]:
    """Shield clean-up code from the cancellation that stops a cancelled workflow (or a
    timed-out step), for at most ``seconds``::

        try:
            await upload(part)
        finally:
            with durable_core.cleanup():
                await delete_partial_upload(part)
    """
    with anyio.CancelScope(shield=True) as scope:
        scope.deadline = anyio.current_time() + durations.seconds(seconds, "cleanup seconds")
        yield scope
