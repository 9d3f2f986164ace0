"""The store's role for sagas (:func:`durable_core.saga`): a cancel that respects owed
compensations. Part of the seam of :mod:`durable_core.seams.store` (which re-exports it);
every SQL store has it, and the engine checks for it with ``isinstance``.

A workflow **owes** compensations while one of its sagas has recorded a compensation
(a ``durable.compensate`` call) and not yet recorded its end (``durable.saga_end``, with
the same saga path as input). Cancelling such a workflow is a **request**: it keeps
running (or is woken to run) so that its worker runs the compensations, then settles
it cancelled. Without the role, a cancel stops the body at once, as before.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .records import Lease


def compensations_of(store: Any) -> Compensations | None:
    """``store`` as a :class:`Compensations`, or ``None`` when it has no such role."""
    return store if isinstance(store, Compensations) else None


@runtime_checkable
class Compensations(Protocol):
    """A store whose cancel of a workflow owing compensations becomes a request."""

    async def owes_compensation(self, workflow_id: str) -> bool:
        """Whether ``workflow_id`` has a saga with a compensation recorded and no end."""
        ...

    async def cancel_requested(self, workflow_id: str) -> str | None:
        """The error JSON of a cancel requested of ``workflow_id`` and not yet settled
        (``None``: none is)."""
        ...

    async def settle_cancelled(
        self, lease: Lease, error: str | None, *, parent_id: str | None = None
    ) -> bool:
        """Settle the workflow of ``lease`` as cancelled when a cancel was requested of it,
        recording ``error`` (``None``: the request's), the request done, fenced by the
        lease, and wake ``parent_id`` if it waits on it; ``False``, writing nothing, when no
        request is pending. A refused lease raises
        :class:`~durable_core.errors.LeaseLostError`."""
        ...
