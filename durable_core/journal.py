"""Durable primitives in a workflow body: journaled at step indexes, replayed from the cache.

A primitive (a send, a child start, a sleep, a receive, a wait on a child)
takes the next step index like a step does. Its result is recorded as that
step's output, so a replay returns it without acting again. A wait that is not
over suspends the workflow: :class:`Suspended` unwinds the body, the executor
leaves the row ``waiting``, and the claim that wakes it replays the body to
the same index.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from .context import WorkflowContext, inside_step
from .errors import FrameworkError, StepNameMismatchError
from .records import StepStatus, Wait, WaitKind

ID_NAMESPACE = uuid.UUID("6c1d4b8e-5f0a-4f43-9d57-2b9c61a1e7d3")
"""Ids derived from a workflow id and a step index (children, messages) live here."""


class Suspended(BaseException):
    """Unwinds a workflow body that waits. A ``BaseException``, so that the body's own
    ``except Exception`` does not swallow it; a body must not catch it."""


def body_context(primitive: str | None = None) -> WorkflowContext | None:
    """The running workflow when called from its body (not from a step), else ``None``.

    With ``primitive``, a call from a step raises: that primitive works only in a body.
    """
    ctx = WorkflowContext.current()
    if ctx is None:
        return None
    if inside_step():
        if primitive is not None:
            raise FrameworkError(
                f"{primitive} works in a workflow body, not inside a step "
                f"(workflow {ctx.workflow_name} {ctx.workflow_id}): call it from the body"
            )
        return None
    return ctx


def derived_id(workflow_id: str, index: int, item: int = 0) -> str:
    """The id of the ``item``-th thing made at step ``index`` of ``workflow_id``."""
    return str(uuid.uuid5(ID_NAMESPACE, f"{workflow_id}/{index}/{item}"))


def _cached(ctx: WorkflowContext, index: int, name: str) -> tuple[StepStatus, str | None] | None:
    step = ctx.run.steps.get(index)
    if step is None:
        return None
    if step.step_name != name:
        raise StepNameMismatchError(
            f"workflow {ctx.workflow_name} ({ctx.workflow_id}) called {name} at index {index}, "
            f"but its history has {step.step_name!r} there. The body must make the same "
            "calls in the same order on every run."
        )
    return step.status, step.output


async def once(
    ctx: WorkflowContext, name: str, input_json: str, act: Callable[[int], Awaitable[str]]
) -> str:
    """Run ``act(index)`` once for this call site; a replay returns its recorded output."""
    run = ctx.run
    index = run.next_step_index()
    cached = _cached(ctx, index, name)
    if cached is not None and cached[0] is StepStatus.SUCCEEDED and cached[1] is not None:
        run.step_replayed(index, name)
        return cached[1]
    output = await act(index)
    await run.record(index, name, input_json, output)
    return output


def _instant(value: datetime | None) -> str:
    return json.dumps(None if value is None else value.isoformat())


def _parse_instant(text: str | None) -> datetime | None:
    value = json.loads(text) if text else None
    return None if value is None else datetime.fromisoformat(value)


async def wait(
    ctx: WorkflowContext,
    name: str,
    input_json: str,
    *,
    kind: WaitKind,
    key: str,
    until: timedelta | datetime | None,
    over: Callable[[int], Awaitable[str | None]],
    timed_out: Callable[[datetime], str],
) -> str:
    """Wait at this call site until ``over(index)`` returns the result (recording it) or
    the deadline passes (recording ``timed_out(deadline)``), suspending in between.

    The deadline (``until``, or ``until`` from the attempt's clock) is fixed the first
    time the call runs and kept in the waiting step's output, so a replay waits for
    the same moment.
    """
    run = ctx.run
    index = run.next_step_index()
    cached = _cached(ctx, index, name)
    if cached is not None and cached[0] is StepStatus.SUCCEEDED and cached[1] is not None:
        run.step_replayed(index, name)
        return cached[1]
    if cached is not None and cached[0] is StepStatus.WAITING:
        deadline = _parse_instant(cached[1])
    else:
        deadline = run.clock() + until if isinstance(until, timedelta) else until
    while True:
        result = await over(index)
        if result is not None:
            return result
        if deadline is not None and run.clock() >= deadline:
            output = timed_out(deadline)
            await run.record(index, name, input_json, output)
            return output
        suspension = Wait(kind, key, deadline, index, name, input_json)
        if await run.suspend(suspension, _instant(deadline)):
            raise Suspended(suspension.waiting_for)


async def nothing(index: int) -> None:
    """A wait that only its deadline ends (a sleep)."""
    return None
