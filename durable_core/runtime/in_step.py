"""Whether the current task runs inside a step body, carried by :mod:`contextvars` flags
(the attempt sets them around a step's function; steps called there run inline, and inside
a transaction step no durable call runs at all)."""

from __future__ import annotations

from contextvars import ContextVar, Token

from ..errors import TransactionStepError

_inside_step: ContextVar[bool] = ContextVar("durable_inside_step", default=False)
_transaction: ContextVar[str | None] = ContextVar("durable_transaction_step", default=None)


def inside_step() -> bool:
    """Whether the current task is inside a step body (nested steps then run inline)."""
    return _inside_step.get()


def enter_step() -> Token[bool]:
    """Mark the current task as inside a step body."""
    return _inside_step.set(True)


def leave_step(token: Token[bool]) -> None:
    """Undo :func:`enter_step`."""
    _inside_step.reset(token)


def enter_transaction(name: str) -> Token[str | None]:
    """Mark the current task as inside the body of the transaction step ``name``."""
    return _transaction.set(name)


def leave_transaction(token: Token[str | None]) -> None:
    """Undo :func:`enter_transaction`."""
    _transaction.reset(token)


def refuse_in_transaction(what: str) -> None:
    """Raise :class:`~durable_core.errors.TransactionStepError` when the current task is
    inside a transaction step's body: ``what`` (a durable call) cannot run there."""
    name = _transaction.get()
    if name is not None:
        raise TransactionStepError(
            f"{what} inside transaction step {name!r}: a transaction step only does database "
            "work on the connection it is given, committed with its record; make durable "
            "calls (steps, sleep, recv, child starts, messages) from the workflow body, "
            "before or after it"
        )
