"""Queues: where workflows wait to be claimed, and the limits a worker fleet keeps per queue.

A workflow's queue is set when it is started (``@workflow(queue=...)``, or
``client.with_options(queue=...)``); a worker serves the queues it is told to
(``durable worker --queue``), claiming only the workflows it has registered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..durations import seconds
from ..errors import ConfigurationError
from .retention import Retention

MAX_QUEUE_NAME = 255

DEFAULT_QUEUE = "default"
"""The queue of a workflow that names none."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` workflows of a queue start in any window of ``period`` seconds."""

    limit: int
    period: float = 1.0
    """Seconds (a ``timedelta`` is converted)."""

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigurationError(
                f"a rate limit is RateLimit(limit >= 1, period > 0 seconds), "
                f"got limit={self.limit!r}, period={self.period!r}"
            )
        period = seconds(self.period, "RateLimit period", allow_zero=False)
        object.__setattr__(self, "period", period)


@dataclass(frozen=True, slots=True)
class Queue:
    """A named queue and its limits (``None``: no limit).

    - ``concurrency``: at most this many of its workflows run at once across every worker;
    - ``worker_concurrency``: at most this many at once on one worker;
    - ``rate_limit``: at most ``limit`` starts per ``period`` across every worker;
    - ``key_concurrency``: at most this many run at once per concurrency key (a workflow's
      key is given with ``client.with_options(concurrency_key=...)``; rows without one
      are not limited by it; a key is counted within its queue);
    - ``key_rate_limit``: at most ``limit`` starts per ``period`` per concurrency key;
    - ``retention``: how long and how many of its settled workflows are kept (a
      :class:`~durable_core.definitions.retention.Retention`; a workflow's own wins).

    A queue with a per-key limit is claimed fairly among its keys: the key running the
    fewest is served first, so one key's backlog never holds back another's work.
    Only the PostgreSQL worker claims, so these limits hold for it (``WorkflowRunner``
    runs what it is given).

    A slot is held while a workflow runs; a waiting workflow holds none, and a crashed
    worker's slots are freed when their leases expire.
    """

    name: str
    concurrency: int | None = None
    worker_concurrency: int | None = None
    rate_limit: RateLimit | None = None
    key_concurrency: int | None = None
    key_rate_limit: RateLimit | None = None
    retention: Retention | None = None

    def __post_init__(self) -> None:
        check_queue_name(self.name)
        if self.retention is not None and not isinstance(self.retention, Retention):
            raise ConfigurationError(
                f"queue {self.name!r}: retention must be a Retention, got {self.retention!r}"
            )
        for field in ("concurrency", "worker_concurrency", "key_concurrency"):
            value = getattr(self, field)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigurationError(
                    f"queue {self.name!r}: {field} must be a whole number of at least 1, "
                    f"got {value!r}"
                )
        for field in ("rate_limit", "key_rate_limit"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, RateLimit):
                raise ConfigurationError(
                    f"queue {self.name!r}: {field} must be a RateLimit, got {value!r}"
                )

    @property
    def fleet_limited(self) -> bool:
        """Whether claiming from it must count what the whole fleet runs (and so be serialized
        between workers)."""
        return self.concurrency is not None or self.rate_limit is not None or self.keyed

    @property
    def keyed(self) -> bool:
        """Whether it limits each concurrency key (and so is claimed fairly among keys)."""
        return self.key_concurrency is not None or self.key_rate_limit is not None

    @property
    def per_key(self) -> int | None:
        """The most one claim may start of one key (``None``: not keyed)."""
        caps = [self.key_concurrency]
        if self.key_rate_limit is not None:
            caps.append(self.key_rate_limit.limit)
        known = [cap for cap in caps if cap is not None]
        return min(known) if known else None


def check_queue_name(name: object) -> str:
    """``name`` if it is a usable queue name; a :class:`ConfigurationError` otherwise."""
    if not isinstance(name, str) or not name or len(name) > MAX_QUEUE_NAME or name != name.strip():
        raise ConfigurationError(
            f"a queue name is a non-empty string of at most {MAX_QUEUE_NAME} characters "
            f"without surrounding spaces, got {name!r}"
        )
    return name


def queue_name(queue: Queue | str) -> str:
    """The name of ``queue`` (a :class:`Queue` or a name, which is checked)."""
    return queue.name if isinstance(queue, Queue) else check_queue_name(queue)


@dataclass(frozen=True, slots=True)
class Route:
    """What one claim may take from one queue: rows of ``names`` in ``queue``, at most
    ``take`` of them (the worker's own room for that queue); ``queue``'s fleet limits
    are applied by the store."""

    queue: Queue
    names: tuple[str, ...]
    take: int


def routes(
    queues: Iterable[Queue], names: Iterable[str], free: int, running: Mapping[str, int]
) -> list[Route]:
    """The routes of a worker serving ``queues`` with workflows ``names``, which has
    ``free`` slots and runs ``running[queue]`` workflows of each queue now."""
    served = tuple(sorted(names))
    result = []
    for queue in queues:
        take = free
        if queue.worker_concurrency is not None:
            take = min(take, queue.worker_concurrency - running.get(queue.name, 0))
        if take > 0 and served:
            result.append(Route(queue, served, take))
    return result


__all__ = [
    "DEFAULT_QUEUE",
    "Queue",
    "RateLimit",
    "Route",
    "check_queue_name",
    "queue_name",
    "routes",
]
