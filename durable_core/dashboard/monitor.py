"""Backlog and throughput per queue over time, sampled while the dashboard is watched.

Each sample reads the backlog (pending, running and waiting workflows per queue)
and the attempts that ended since the previous sample (by the attempt history's
key, so the count is exact however far apart the samples are). Samples are taken
on demand, at most one per ``interval`` seconds, and the last ``keep`` are kept
in memory: the charts cover the time since the dashboard was first opened.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..caller.client import DurableClient
from ..seams.records import WorkflowStatus

FINAL_OUTCOMES = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
"""Attempt outcomes that end their workflow (``retry`` and ``crashed`` do not)."""


@dataclass(frozen=True)
class Sample:
    """One look at the store: when, the backlog and the throughput since the last look."""

    at: float
    backlog: dict[str, dict[str, int]]
    """Queue -> status -> count, for pending, running and waiting."""
    finished_per_second: dict[str, float] | None
    """Queue -> workflows finished per second since the previous sample (``None`` for the
    first sample, which has no previous one)."""


@dataclass
class Monitor:
    """Takes and keeps samples for the charts."""

    client: DurableClient
    interval: float = 2.0
    keep: int = 1800
    samples: deque[Sample] = field(default_factory=deque)
    _cursor: int | None = None
    _cursor_at: float = 0.0
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def sample(self) -> None:
        """Take a sample unless the last one is younger than ``interval``."""
        async with self._lock:
            now = time.time()
            if self.samples and now - self.samples[-1].at < self.interval:
                return
            backlog: dict[str, dict[str, int]] = {}
            for count in await self.client.backlog():
                statuses = backlog.setdefault(count.queue, {})
                statuses[count.status.value] = statuses.get(count.status.value, 0) + count.count
            rates: dict[str, float] | None = None
            ended = None
            if self.client.has_stats:
                ended = await self.client.count_ended_attempts(self._cursor)
            if ended is not None and self._cursor is not None:
                rates = {}
                elapsed = max(now - self._cursor_at, 1e-3)
                for (queue, outcome), n in ended.counts.items():
                    if outcome in FINAL_OUTCOMES:
                        rates[queue] = rates.get(queue, 0.0) + n / elapsed
            if ended is not None:
                self._cursor, self._cursor_at = ended.cursor, now
            self.samples.append(Sample(now, backlog, rates))
            while len(self.samples) > self.keep:
                self.samples.popleft()

    def series(self) -> dict[str, Any]:
        """The samples as uPlot data: times, then per queue its backlog and throughput."""
        queues = sorted(
            {q for s in self.samples for q in (*s.backlog, *(s.finished_per_second or {}))}
        )
        times = [round(s.at, 3) for s in self.samples]
        pending = WorkflowStatus.PENDING.value
        return {
            "queues": queues,
            "times": times,
            "backlog": {
                q: [s.backlog.get(q, {}).get(pending, 0) for s in self.samples] for q in queues
            },
            "throughput": {
                q: [
                    None
                    if s.finished_per_second is None
                    else round(s.finished_per_second.get(q, 0.0), 3)
                    for s in self.samples
                ]
                for q in queues
            },
            "now": {q: self.samples[-1].backlog.get(q, {}) if self.samples else {} for q in queues},
        }
