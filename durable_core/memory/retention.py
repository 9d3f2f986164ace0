"""Pruning settled workflows (the :class:`~durable_core.seams.retention.Pruning` capability),
under the rule of :mod:`durable_core.sql.retention`: a settled workflow goes with every row
of its own, never one that is pending, running or waiting, one whose parent has not
settled, or one with a child that has not settled; the oldest first."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from datetime import datetime
from typing import Any

from ..seams.records import WorkflowStatus
from ..seams.retention import PruneFilter
from .schedules import ScheduleOperations
from .tables import Row, Tables

_UNSETTLED = {s.value for s in WorkflowStatus if not s.is_terminal}


_Owned = Callable[[Tables, str, bool], int]
"""How many rows of one table a workflow has (and, when told to, drop them)."""


def _by_id(table: Callable[[Tables], MutableMapping[str, Any]]) -> _Owned:
    """A table kept by workflow id, a collection of the workflow's rows under each."""

    def rows(t: Tables, workflow_id: str, drop: bool) -> int:
        found = table(t)
        mine = found.pop(workflow_id, None) if drop else found.get(workflow_id)
        return 0 if mine is None else len(mine)

    return rows


def _by_key(table: Callable[[Tables], MutableMapping[tuple[str, str], Any]], each: bool) -> _Owned:
    """A table kept by (workflow id, key): one row per key, or (``each``) a list of rows."""

    def rows(t: Tables, workflow_id: str, drop: bool) -> int:
        found = table(t)
        keys = [key for key in found if key[0] == workflow_id]
        count = sum(len(found[key]) for key in keys) if each else len(keys)
        if drop:
            for key in keys:
                del found[key]
        return count

    return rows


def _debounces(t: Tables, workflow_id: str, drop: bool) -> int:
    keys = [key for key, row in t.debounces.items() if row["workflow_id"] == workflow_id]
    if drop:
        for key in keys:
            del t.debounces[key]
    return len(keys)


def _attempts(t: Tables, workflow_id: str, drop: bool) -> int:
    mine = sum(1 for row in t.attempts if row["workflow_id"] == workflow_id)
    if drop and mine:
        t.attempts[:] = [row for row in t.attempts if row["workflow_id"] != workflow_id]
    return mine


OWNED: dict[str, _Owned] = {
    "workflow_attempts": _attempts,
    "workflow_attributes": _by_id(lambda t: t.attributes),
    "workflow_debounces": _debounces,
    "workflow_events": _by_key(lambda t: t.events, each=False),
    "workflow_messages": _by_id(lambda t: t.messages),
    "workflow_step_tries": _by_id(lambda t: t.step_tries),
    "workflow_steps": _by_id(lambda t: t.steps),
    "workflow_streams": _by_key(lambda t: t.streams, each=True),
    "workflow_updates": _by_id(lambda t: t.updates),
}
"""Each table of the SQL schema whose rows belong to a workflow
(:data:`durable_core.sql.retention.OWNED`, a test checks they are the same), and how to
count (and drop) a workflow's rows of it here."""


def _chosen(row: Row, which: PruneFilter) -> bool:
    return (
        row["status"] in {s.value for s in which.statuses}
        and row["completed_at"] is not None
        and (not which.names or row["name"] in which.names)
        and (not which.queues or row["queue"] in which.queues)
        and row["name"] not in which.except_names
    )


def _prunable(t: Tables, which: PruneFilter) -> list[Row]:
    unsettled_parents = {
        row["parent_id"] for row in t.workflows.values() if row["status"] in _UNSETTLED
    }
    found = [
        row
        for row in t.workflows.values()
        if _chosen(row, which)
        and row["completed_at"] < which.before
        and row["id"] not in unsettled_parents
        and (
            row["parent_id"] is None
            or t.workflows.get(row["parent_id"], {}).get("status") not in _UNSETTLED
        )
    ]
    return sorted(found, key=lambda row: (row["completed_at"], row["id"]))


def _owned(t: Tables, ids: list[str], drop: bool) -> dict[str, int]:
    counted = {name: sum(rows(t, one, drop) for one in ids) for name, rows in OWNED.items()}
    if drop:
        for one in ids:
            del t.workflows[one]
            t.watches.pop(one, None)
    counted["workflows"] = len(ids)
    return counted


class PruningOperations(ScheduleOperations):
    """The :class:`~durable_core.seams.retention.Pruning` capability of the memory store."""

    async def prune_workflows(
        self, which: PruneFilter, *, limit: int, wait: bool = True
    ) -> dict[str, int] | None:
        """Remove at most ``limit`` of the settled workflows ``which`` selects (the oldest
        first) and every row of theirs, at once; the rows removed, per table. Prunes
        take turns under the store's lock, so ``wait`` never finds another's turn."""
        t = await self._begin()
        with t.lock:
            ids = [row["id"] for row in _prunable(t, which)[:limit]]
            return _owned(t, ids, drop=True)

    async def count_prunable(self, which: PruneFilter) -> dict[str, int]:
        """What :meth:`prune_workflows` would remove of ``which``, with no limit, per table."""
        t = await self._begin()
        with t.lock:
            return _owned(t, [row["id"] for row in _prunable(t, which)], drop=False)

    async def newest_kept(self, which: PruneFilter, count: int) -> datetime | None:
        """When the ``count``-th newest of ``which``'s workflows ended (``before``
        ignored); ``None`` when there are not that many."""
        t = await self._begin()
        with t.lock:
            ended = sorted(
                (row["completed_at"] for row in t.workflows.values() if _chosen(row, which)),
                reverse=True,
            )
        return ended[count - 1] if len(ended) >= count else None
