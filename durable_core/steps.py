"""Declaring steps: ``@workflow_step`` and the caching rules that make replay work."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

import anyio.to_thread

from . import durations
from .context import WorkflowContext, enter_step, inside_step, leave_step
from .errors import (
    FrameworkError,
    RegistrationError,
    StepInputMismatchError,
    StepNameMismatchError,
)
from .journal import Suspended
from .records import StepRecord, StepStatus, Wait, WaitKind
from .registry import declared_timeout, qualified_name
from .retry import RetryPolicy, StepTimeoutError
from .serialization import decode, encode, encode_arguments

P = ParamSpec("P")
R = TypeVar("R")


SUSPEND_RETRY_AFTER = 5.0
"""A step retry due later than this many seconds suspends the workflow instead of
holding its worker slot."""


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
        functools.update_wrapper(self, fn)

    async def _run_body(self, *args: P.args, **kwargs: P.kwargs) -> R:
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
            return await self._run_body(*args, **kwargs)
        return await self._run_durably(ctx, args, kwargs)

    async def _run_durably(
        self, ctx: WorkflowContext, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        run = ctx.run
        index = run.next_step_index()
        what = f"input of step {self.name!r} (index {index})"
        input_json = encode_arguments(args, kwargs, what=what)
        cached = run.steps.get(index)
        if cached is not None:
            try:
                _check_history(ctx, cached, self.name, input_json)
                if cached.status is StepStatus.SUCCEEDED and cached.output is not None:
                    value = decode(cached.output, what=f"cached output of step {self.name!r}")
                    run.step_replayed(index, self.name)
                    return cast(R, value)
            except FrameworkError:
                # A broken replay (determinism, corrupt cache) is recorded against this step.
                run.replay_broken(index, self.name)
                raise

        tries = 1
        if cached is not None and cached.status is StepStatus.WAITING:
            tries = await self._retry_due(ctx, index, input_json, cached)
        while True:
            await run.step_started(index, self.name, input_json, tries)
            token = enter_step()
            try:
                result = await self._run_body(*args, **kwargs)
                output_json = encode(result, what=f"output of step {self.name!r} (index {index})")
            except Exception as exc:
                await run.step_failed(index, self.name, exc)
                if self.retry is None:
                    raise
                if not self.retry.retries(exc) or tries >= self.retry.max_attempts:
                    run.give_up(exc)  # this step's policy decided: if it escapes, it fails
                    raise
                delay = self.retry.delay(tries)
                if delay > SUSPEND_RETRY_AFTER:
                    await self._suspend_retry(ctx, index, input_json, tries, delay)
                await anyio.sleep(delay)
                tries += 1
                continue
            finally:
                leave_step(token)
            await run.step_succeeded(index, self.name, input_json, output_json)
            return result

    def _retry_wait(self, index: int, input_json: str, deadline: datetime) -> Wait:
        return Wait(WaitKind.RETRY, self.name, deadline, index, self.name, input_json)

    async def _suspend_retry(
        self, ctx: WorkflowContext, index: int, input_json: str, tries: int, delay: float
    ) -> None:
        """Suspend until the next try is due; the step row keeps the try count and error."""
        deadline = ctx.run.clock() + timedelta(seconds=delay)
        state = json.dumps({"deadline": deadline.isoformat(), "tries": tries})
        await ctx.run.suspend(self._retry_wait(index, input_json, deadline), state)
        raise Suspended(f"retry of {self.name}")

    async def _retry_due(
        self, ctx: WorkflowContext, index: int, input_json: str, cached: StepRecord
    ) -> int:
        """Resuming a suspended retry: suspend again if it is not due yet; else the number
        of the try that failed last."""
        state = json.loads(cached.output or "{}")
        deadline = datetime.fromisoformat(state["deadline"])
        if ctx.run.clock() < deadline:
            await ctx.run.suspend(
                self._retry_wait(index, input_json, deadline), cached.output or ""
            )
            raise Suspended(f"retry of {self.name}")
        return int(state["tries"]) + 1

    def __repr__(self) -> str:
        return f"<workflow_step {self.name}>"


def _check_history(ctx: WorkflowContext, cached: StepRecord, name: str, input_json: str) -> None:
    if cached.step_name != name:
        raise StepNameMismatchError(
            f"workflow {ctx.workflow_name} ({ctx.workflow_id}) called step {name!r} at index "
            f"{cached.step_index}, but its history has step {cached.step_name!r} there. The body "
            "must call the same steps in the same order on every run: move branching into a step."
        )
    if cached.status is StepStatus.SUCCEEDED and cached.input != input_json:
        raise StepInputMismatchError(
            f"workflow {ctx.workflow_name} ({ctx.workflow_id}) replayed step {name!r} at index "
            f"{cached.step_index} with input {input_json} but it first ran with {cached.input}. "
            "Step inputs must be deterministic: compute non-deterministic values inside a step."
        )


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
) -> Callable[[Callable[P, Any]], Step[P, Any]]: ...


def workflow_step(
    fn: Callable[P, Any] | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
) -> Step[P, Any] | Callable[[Callable[P, Any]], Step[P, Any]]:
    """Declare a step. An ``async def`` runs on the event loop; a plain ``def`` in a worker
    thread. Either way, callers ``await`` it. ``name`` defaults to ``module.qualname``.

    ``retry`` retries a failing step inside the same attempt, without replaying the
    body; when the policy gives up, the workflow fails. ``timeout`` cancels a body
    that runs longer (a :class:`~durable_core.retry.StepTimeoutError`, retried by
    the policy)."""
    seconds = declared_timeout(timeout, "@workflow_step timeout")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise RegistrationError(f"retry must be a RetryPolicy, got {retry!r}")

    def decorate(func: Callable[P, Any]) -> Step[P, Any]:
        return Step(func, name=name or qualified_name(func), retry=retry, timeout=seconds)

    return decorate if fn is None else decorate(fn)


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
