"""``LeaseKeeper``: one task renewing the lease of every attempt in flight; and
:func:`end_dead_leases`, which ends the leases of workers whose database session ended."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from ..errors import FrameworkError
from ..redaction import get_logger
from ..seams.store import WorkerLiveness
from .attempt import Attempt
from .config import WorkflowConfig

logger = get_logger("durable_core.worker")

LIVENESS_CHECK_FLOOR = 0.1
"""The shortest interval between two checks for dead workers, whatever the poll interval."""


class LeaseKeeper:
    """Renews the lease of every attempt it keeps, from one task.

    Each lease is renewed at half the lock timeout after its attempt began and after
    each renewal, without a task and a cancelled scope per attempt. An attempt leaves
    the keeper when its body ends, however it ends; a renewal still in flight then
    changes nothing.
    """

    def __init__(self) -> None:
        self._attempts: set[Attempt] = set()

    def keep(self, attempt: Attempt) -> None:
        """Renew ``attempt``'s lease until :meth:`release`."""
        self._attempts.add(attempt)

    def release(self, attempt: Attempt) -> None:
        """Stop renewing ``attempt``'s lease."""
        self._attempts.discard(attempt)

    def keeps(self, attempt: Attempt) -> bool:
        """Whether ``attempt``'s lease is still renewed here."""
        return attempt in self._attempts

    async def run(self, interval: float) -> None:
        """Renew leases until cancelled."""
        # Sleeping at most ``interval`` means every attempt added meanwhile is due
        # after the next wake-up, so adding one never needs to wake this task.
        async with anyio.create_task_group() as renewals:
            while True:
                now = anyio.current_time()
                wake = now + interval
                for attempt in list(self._attempts):
                    if attempt.renew_at <= now:
                        attempt.renew_at = math.inf  # one renewal at a time
                        renewals.start_soon(attempt.renew, self)
                    elif attempt.renew_at < wake:
                        wake = attempt.renew_at
                await anyio.sleep(wake - now)


async def end_dead_leases(
    store: WorkerLiveness, every: float, worker_id: str, found: Callable[[], None]
) -> None:
    """Until cancelled, every ``every`` seconds (at least :data:`LIVENESS_CHECK_FLOOR`), end
    the leases of the workers whose liveness session has ended, and call ``found()`` when
    there were some: their workflows are claimable now, here or by any worker."""
    while True:
        try:
            dead = await store.end_dead_leases()
        except FrameworkError as exc:
            logger.debug(
                "could not check for dead workers: %s", exc, extra={"worker_id": worker_id}
            )
            dead = {}
        for gone, leases in dead.items():
            # A worker that stopped cleanly held none: its session's end is no news.
            logger.log(
                logging.WARNING if leases else logging.DEBUG,
                "worker %s is dead (its database session ended): the %d workflows it ran "
                "are taken over now, without waiting for their leases to expire",
                gone,
                leases,
                extra={"worker_id": worker_id, "dead_worker": gone},
            )
        if any(dead.values()):
            found()
        await anyio.sleep(max(every, LIVENESS_CHECK_FLOOR))


async def start_liveness(
    store: object,
    group: TaskGroup,
    worker_id: str,
    config: WorkflowConfig,
    found: Callable[[], None],
) -> None:
    """On a store that offers it, hold ``worker_id``'s liveness session and, every poll
    interval, end the leases of dead workers (:func:`end_dead_leases`), both in ``group``;
    return once the first try to take the session has ended. Elsewhere do nothing: a dead
    worker's workflows wait for their leases to expire."""
    if not isinstance(store, WorkerLiveness) or not store.offers_liveness:
        return
    await group.start(store.hold_liveness, worker_id)
    group.start_soon(end_dead_leases, store, config.poll_interval, worker_id, found)
