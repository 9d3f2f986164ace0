"""``LeaseKeeper``: one task renewing the lease of every attempt in flight."""

from __future__ import annotations

import math

import anyio

from .attempt import Attempt


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
