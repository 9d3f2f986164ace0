"""The ambient state of a running workflow, carried by :mod:`contextvars`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from .records import Lease, StepRecord
from .store import Store

_current: ContextVar[WorkflowContext | None] = ContextVar("durable_workflow_context", default=None)
_inside_step: ContextVar[bool] = ContextVar("durable_inside_step", default=False)

Persist = Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]


async def _persist_once(operation: Callable[[], Awaitable[None]]) -> None:
    await operation()


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
    store: Store
    lease: Lease
    steps: dict[int, StepRecord] = field(default_factory=dict)
    persist: Persist = field(default=_persist_once, repr=False)
    failed_step: tuple[int, str] | None = None
    _next_index: int = 0

    def next_step_index(self) -> int:
        """Assign the next step index; indexes follow the order of step calls."""
        index = self._next_index
        self._next_index += 1
        return index

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


def inside_step() -> bool:
    """Whether the current task is inside a step body (nested steps then run inline)."""
    return _inside_step.get()


def enter_step() -> Token[bool]:
    """Mark the current task as inside a step body."""
    return _inside_step.set(True)


def leave_step(token: Token[bool]) -> None:
    """Undo :func:`enter_step`."""
    _inside_step.reset(token)
