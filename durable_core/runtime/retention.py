"""Retention applied: pruning settled workflows in batches, by hand (``durable prune``) or by
the fleet, following the :class:`~durable_core.definitions.retention.Retention` policies
its registry declares.

Each worker runs a :class:`RetentionKeeper` beside its claims. Every policy's ``every``
seconds it turns each policy into :class:`~durable_core.seams.retention.PruneFilter` s
(a workflow's policy covers its name; a queue's covers the queue but the names that have
their own) and prunes them in batches of the policy's ``batch``, each batch a
transaction of its own that skips rows others hold. Batches of the fleet take turns:
a worker that finds another's batch running leaves the round to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

import anyio

from ..definitions.registry import Registry
from ..definitions.retention import SETTLED, Keep, Retention
from ..durations import utcnow
from ..errors import FrameworkError
from ..redaction import get_logger
from ..seams.records import WorkflowStatus
from ..seams.retention import PruneFilter, Pruning
from ..seams.store import Store

logger = get_logger("durable_core.retention")

PAUSE_SECONDS = 0.05
"""Between two batches of the fleet's prune: room for the claims and settles it shares the
database with."""


async def prune(
    store: Pruning,
    which: PruneFilter,
    *,
    batch: int = 1000,
    wait: bool = True,
    pause: float = 0.0,
    on_batch: Callable[[dict[str, int]], None] | None = None,
) -> Counter[str] | None:
    """Prune every workflow ``which`` selects, ``batch`` at a time; the rows removed per
    table. Without ``wait``, stop (``None`` if nothing was removed yet) when another
    prune holds the turn."""
    total: Counter[str] = Counter()
    while True:
        removed = await store.prune_workflows(which, limit=batch, wait=wait)
        if removed is None:
            return total if total else None
        total.update(removed)
        if on_batch is not None:
            on_batch(removed)
        if removed.get("workflows", 0) < batch:
            return total
        if pause:
            await anyio.sleep(pause)


def policies(registry: Registry) -> list[tuple[Retention, str | None, str | None, list[str]]]:
    """Each declared policy: ``(policy, workflow name, queue, names it leaves out)``, one of
    the name and the queue set."""
    named: dict[str, Retention] = {}
    for name in registry.names():
        declared = registry.get(name).retention
        if declared is not None:
            named[name] = declared
    found: list[tuple[Retention, str | None, str | None, list[str]]] = [
        (policy, name, None, []) for name, policy in named.items()
    ]
    for queue in registry.queues():
        if queue.retention is not None:
            found.append((queue.retention, None, queue.name, sorted(named)))
    return found


async def filters_now(
    store: Pruning,
    policy: Retention,
    name: str | None,
    queue: str | None,
    excepted: list[str],
    now: datetime,
) -> list[PruneFilter]:
    """What ``policy`` prunes now, one filter per status it keeps less than all of."""
    found = []
    for status, keep in policy.kept().items():
        scope = PruneFilter(
            before=now,
            statuses=(WorkflowStatus(status),),
            names=(name,) if name else (),
            queues=(queue,) if queue else (),
            except_names=tuple(excepted),
        )
        before = await cutoff(store, scope, keep, now)
        if before is not None:
            found.append(
                PruneFilter(before, scope.statuses, scope.names, scope.queues, scope.except_names)
            )
    return found


async def cutoff(store: Pruning, scope: PruneFilter, keep: Keep, now: datetime) -> datetime | None:
    """Before when ``keep`` lets ``scope``'s workflows go (``None``: none go)."""
    moments: list[datetime] = []
    if keep.seconds is not None:
        moments.append(now - timedelta(seconds=keep.seconds))
    if keep.count is not None:
        newest = await store.newest_kept(scope, keep.count)
        if newest is not None:
            moments.append(newest)
    return max(moments) if moments else None


class RetentionKeeper:
    """Applies the registry's retention policies every policy's ``every`` seconds."""

    def __init__(self, store: Store, registry: Registry, *, worker_id: str) -> None:
        self.store = store
        self.registry = registry
        self.worker_id = worker_id
        self.removed: Counter[str] = Counter()
        """Every row this keeper removed, per table."""

    async def run(self) -> None:
        """Prune on every policy's schedule until cancelled (nothing without a policy, or
        on a store that cannot prune)."""
        declared = policies(self.registry)
        if not declared or not isinstance(self.store, Pruning):
            return
        store = self.store
        due = [0.0] * len(declared)
        clock = 0.0
        while True:
            for index, (policy, name, queue, excepted) in enumerate(declared):
                if due[index] <= clock:
                    due[index] = clock + policy.interval
                    await self._apply(store, policy, name, queue, excepted)
            step = max(0.0, min(due) - clock)
            await anyio.sleep(step)
            clock += step

    async def _apply(
        self,
        store: Pruning,
        policy: Retention,
        name: str | None,
        queue: str | None,
        excepted: list[str],
    ) -> None:
        whose = f"workflow {name}" if name else f"queue {queue}"
        try:
            removed: Counter[str] = Counter()
            for which in await filters_now(store, policy, name, queue, excepted, utcnow()):
                done = await prune(
                    store, which, batch=policy.batch, wait=False, pause=PAUSE_SECONDS
                )
                if done is None:
                    return  # another worker's turn
                removed.update(done)
        except FrameworkError as exc:
            logger.warning(
                "retention of %s failed, trying again in %ss: %s",
                whose,
                policy.interval,
                exc,
                extra={"worker_id": self.worker_id},
            )
            return
        if removed.get("workflows"):
            self.removed.update(removed)
            logger.info(
                "retention of %s: pruned %d settled workflows (%s)",
                whose,
                removed["workflows"],
                ", ".join(f"{table} {n}" for table, n in sorted(removed.items()) if n),
                extra={"worker_id": self.worker_id},
            )


__all__ = ["SETTLED", "RetentionKeeper", "cutoff", "filters_now", "policies", "prune"]
