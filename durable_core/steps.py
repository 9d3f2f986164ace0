"""Declaring steps: ``@workflow_step`` and the caching rules that make replay work."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

import anyio.to_thread

from .context import WorkflowContext, enter_step, inside_step, leave_step
from .errors import FrameworkError, StepInputMismatchError, StepNameMismatchError
from .records import StepRecord, StepStatus
from .registry import qualified_name
from .serialization import decode, encode, encode_arguments

P = ParamSpec("P")
R = TypeVar("R")


class Step(Generic[P, R]):
    """A step: inside a workflow its output is persisted and replayed from cache;
    outside one it runs inline with no persistence."""

    def __init__(self, fn: Callable[P, Awaitable[R]] | Callable[P, R], *, name: str) -> None:
        self.fn = fn
        self.name = name
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    async def _run_body(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.is_async:
            # String casts: subscripting typing.Callable at run time costs ~1 us a call.
            return await cast("Callable[P, Awaitable[R]]", self.fn)(*args, **kwargs)
        call = functools.partial(cast("Callable[P, R]", self.fn), *args, **kwargs)
        return await anyio.to_thread.run_sync(call)

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

        await run.step_started(index, self.name, input_json)
        token = enter_step()
        try:
            result = await self._run_body(*args, **kwargs)
            output_json = encode(result, what=f"output of step {self.name!r} (index {index})")
        except Exception as exc:
            await run.step_failed(index, self.name, exc)
            raise
        finally:
            leave_step(token)
        await run.step_succeeded(index, self.name, input_json, output_json)
        return result

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
def workflow_step(*, name: str | None = None) -> Callable[[Callable[P, Any]], Step[P, Any]]: ...


def workflow_step(
    fn: Callable[P, Any] | None = None, /, *, name: str | None = None
) -> Step[P, Any] | Callable[[Callable[P, Any]], Step[P, Any]]:
    """Declare a step. An ``async def`` runs on the event loop; a plain ``def`` in a worker
    thread. Either way, callers ``await`` it. ``name`` defaults to ``module.qualname``."""

    def decorate(func: Callable[P, Any]) -> Step[P, Any]:
        return Step(func, name=name or qualified_name(func))

    return decorate if fn is None else decorate(fn)
