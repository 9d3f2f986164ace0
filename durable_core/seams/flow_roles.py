"""The store's flow-control roles (schema version 10): debouncing starts. Part of the seam
of :mod:`durable_core.seams.store`; every SQL store has it, and the client checks for it
with ``isinstance``. (Per-key limits are the claim's: a
:class:`~durable_core.seams.store.Claimer` applies them.)"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..errors import DebounceNotSupportedError
from .records import NewWorkflow


@runtime_checkable
class Debouncer(Protocol):
    """A store that collapses the starts of a debounce key into one run (schema version 10)."""

    async def debounce(
        self,
        workflow: NewWorkflow,
        key: str,
        window_seconds: float,
        max_wait_seconds: float | None,
    ) -> tuple[str, bool]:
        """In one transaction, against every process: when ``workflow.name``'s ``key`` has a
        run that has not started, give it ``workflow``'s input and push its start to
        ``window_seconds`` from now (never past its window's first start plus the
        ``max_wait_seconds`` that start gave); otherwise enqueue ``workflow`` that far
        ahead as the key's run. The run's id, and whether ``workflow`` was written."""
        ...


def debouncer_of(store: Any) -> Debouncer:
    """``store`` as a :class:`Debouncer`, or a
    :class:`~durable_core.errors.DebounceNotSupportedError`."""
    if not isinstance(store, Debouncer):
        description = getattr(store, "description", type(store).__name__)
        raise DebounceNotSupportedError(
            f"{description} cannot debounce starts (it is not a Debouncer store)"
        )
    return store


__all__ = ["Debouncer", "debouncer_of"]
