"""The ambient state of a running workflow, carried by :mod:`contextvars`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..definitions import registry
from ..definitions.schedules import scheduled_at
from ..errors import FrameworkError
from ..seams.store import Store
from .in_step import inside_step, refuse_in_transaction

if TYPE_CHECKING:
    from .attempt import Attempt

_current: ContextVar[WorkflowContext | None] = ContextVar("durable_workflow_context", default=None)


@dataclass(eq=False)
class WorkflowContext:
    """What a workflow body (and the steps it calls) can know about its run.

    ``WorkflowContext.current()`` returns it inside a workflow and ``None``
    elsewhere, so helpers can tell whether they run under a worker.
    """

    workflow_id: str
    workflow_name: str
    attempt: int
    max_attempts: int
    worker_id: str
    run: Attempt = field(repr=False)
    """The attempt being run: every durable call of the body goes through it."""
    scheduled_at: datetime | None = None
    """The tick a schedule started this workflow for (``None``: not started by one)."""

    @classmethod
    def of(cls, run: Attempt) -> WorkflowContext:
        """The context of the workflow ``run`` runs."""
        claimed = run.claimed
        return cls(
            workflow_id=claimed.id,
            workflow_name=claimed.name,
            attempt=claimed.attempts,
            max_attempts=claimed.max_attempts,
            worker_id=claimed.lease.worker_id,
            run=run,
            scheduled_at=scheduled_at(claimed.headers),
        )

    @property
    def store(self) -> Store:
        """The store the workflow runs on (for reads: writes go through :attr:`run`)."""
        return self.run.store

    @staticmethod
    def current() -> WorkflowContext | None:
        """The context of the workflow running in this task, if any."""
        return _current.get()

    @staticmethod
    def is_active() -> bool:
        """Whether the current task runs under a workflow."""
        return _current.get() is not None

    def activate(self) -> Token[WorkflowContext | None]:
        """Make this the current context; pass the token to :meth:`deactivate`."""
        return _current.set(self)

    @staticmethod
    def deactivate(token: Token[WorkflowContext | None]) -> None:
        """Restore the context that was current before :meth:`activate`."""
        _current.reset(token)


def body_context(primitive: str | None = None) -> WorkflowContext | None:
    """The running workflow when called from its body (not from a step), else ``None``.

    With ``primitive``, a call from a step raises: that primitive works only in a body.
    Any call from a transaction step raises: nothing durable runs in its transaction.
    """
    ctx = _current.get()
    if ctx is None:
        return None
    if inside_step():
        refuse_in_transaction(primitive or "a durable call (sleep, a child start, a message...)")
        if primitive is not None:
            raise FrameworkError(
                f"{primitive} works in a workflow body, not inside a step "
                f"(workflow {ctx.workflow_name} {ctx.workflow_id}): call it from the body"
            )
        return None
    return ctx


async def body_effect(name: str, args: list[Any], act: Callable[[], Awaitable[str]]) -> str:
    """Run the write ``act`` (it returns its output JSON). From a workflow body, through
    the attempt: once per call site (a replay returns the recorded output), after every
    write before it has committed, once the lease is renewed (``act`` takes none: see
    :meth:`~durable_core.runtime.effects.Effects.fence_checked`). Elsewhere, at once."""
    ctx = body_context()
    if ctx is None:
        return await act()
    run = ctx.run
    return await run.effect(name, json.dumps(args), lambda call: run.fence_checked(act))


registry.body_running = WorkflowContext.is_active  # a workflow called in a body: no warning
