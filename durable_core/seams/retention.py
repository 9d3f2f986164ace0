"""The store's side of retention: which settled workflows a prune removes (:class:`PruneFilter`)
and the :class:`Pruning` capability that removes them (``durable prune``, the fleet's
retention policies)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from .records import WorkflowStatus

__all__ = ["SETTLED_STATUSES", "PruneFilter", "Pruning"]

SETTLED_STATUSES = (WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class PruneFilter:
    """The settled workflows that ended (``completed_at``) before ``before``, of one of
    ``statuses``, of one of ``names`` and ``queues`` (empty: any) and of none of
    ``except_names``. A workflow still running, waiting or pending is never among them,
    nor one whose parent or one of whose children has not settled."""

    before: datetime
    statuses: tuple[WorkflowStatus, ...] = SETTLED_STATUSES
    names: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    except_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.statuses or any(not s.is_terminal for s in self.statuses):
            raise ValueError(f"a prune removes settled workflows only, got {self.statuses}")


@runtime_checkable
class Pruning(Protocol):
    """A store that removes settled workflows with everything that belongs to them."""

    async def prune_workflows(
        self, which: PruneFilter, *, limit: int, wait: bool = True
    ) -> dict[str, int] | None:
        """Remove at most ``limit`` of the workflows ``which`` selects (the oldest first)
        and every row of theirs, in one transaction, skipping rows another transaction
        holds; how many rows went, per table (``workflows`` among them). One prune runs at
        a time: without ``wait``, ``None`` (nothing done) while another holds its turn."""
        ...

    async def count_prunable(self, which: PruneFilter) -> dict[str, int]:
        """What :meth:`prune_workflows` would remove of ``which``, with no limit, per table."""
        ...

    async def newest_kept(self, which: PruneFilter, count: int) -> datetime | None:
        """When the ``count``-th newest of ``which``'s workflows (``before`` ignored)
        ended; ``None`` when there are not that many."""
        ...
