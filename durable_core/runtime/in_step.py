"""Whether the current task runs inside a step body, carried by a :mod:`contextvars` flag
(the attempt sets it around a step's function; steps called there run inline)."""

from __future__ import annotations

from contextvars import ContextVar, Token

_inside_step: ContextVar[bool] = ContextVar("durable_inside_step", default=False)


def inside_step() -> bool:
    """Whether the current task is inside a step body (nested steps then run inline)."""
    return _inside_step.get()


def enter_step() -> Token[bool]:
    """Mark the current task as inside a step body."""
    return _inside_step.set(True)


def leave_step(token: Token[bool]) -> None:
    """Undo :func:`enter_step`."""
    _inside_step.reset(token)
