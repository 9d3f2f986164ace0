"""What an operator reads besides workflow rows: live workers, failures counted by error
type, activity over a window, and the filter a bulk action is given.

The stores answer these through :class:`~durable_core.seams.store.WorkerRegistry` and
:class:`~durable_core.seams.store.OperatorQueries` (schema version 6); the client,
``durable stats`` and the dashboard read them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import ConfigurationError
from .records import BacklogRecord, WorkflowStatus


@dataclass(frozen=True, slots=True)
class WorkflowFilter:
    """Which workflows a count, a grouping or a bulk action covers (``None``: any).

    ``error_type`` is the recorded error's type (``builtins.ConnectionError``); the
    creation times bound as :meth:`~durable_core.caller.client.DurableClient.list_workflows` does.
    """

    status: WorkflowStatus | str | None = None
    """A :class:`WorkflowStatus` or its value (kept as the status)."""
    name: str | None = None
    queue: str | None = None
    error_type: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    def __post_init__(self) -> None:
        if isinstance(self.status, str) and not isinstance(self.status, WorkflowStatus):
            try:
                object.__setattr__(self, "status", WorkflowStatus(self.status))
            except ValueError:
                choices = ", ".join(s.value for s in WorkflowStatus)
                raise ConfigurationError(
                    f"unknown status {self.status!r}; one of {choices}"
                ) from None
        for what in ("created_after", "created_before"):
            moment = getattr(self, what)
            if moment is not None and moment.tzinfo is None:
                raise ConfigurationError(f"{what} must be an aware datetime, got {moment!r}")

    def given(self) -> dict[str, object]:
        """The filters that are set, by name."""
        return {
            name: getattr(self, name) for name in self.__slots__ if getattr(self, name) is not None
        }


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One worker's row: who it is, what it serves, how busy it was at its last heartbeat."""

    worker_id: str
    host: str
    pid: int
    concurrency: int
    queues: tuple[str, ...]
    """The queues it claims from."""
    names: tuple[str, ...]
    """The workflow names it runs (in every one of its queues)."""
    in_flight: int
    """The slots it holds: workflows whose bodies run (one settling holds none)."""
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    """When it counts as gone unless it beats again (a lock timeout after its last beat)."""
    live: bool = True
    """Whether ``expires_at`` was still ahead when the row was read."""

    def serves(self, queue: str, name: str) -> bool:
        """Whether it claims workflows named ``name`` from ``queue``."""
        return queue in self.queues and name in self.names


def dump_names(names: Iterable[str]) -> str:
    """A worker's queues or names, as its row keeps them."""
    return json.dumps(sorted(set(names)))


def load_names(text: str | None) -> tuple[str, ...]:
    """A worker's queues or names from its row (nothing, for a row that is not a list)."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return ()
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


@dataclass(frozen=True, slots=True)
class Unserved:
    """Pending workflows of a queue and name that no live worker serves."""

    queue: str
    name: str
    pending: int
    oldest: datetime

    @property
    def message(self) -> str:
        """What the CLI, a wait that timed out and the dashboard say about it."""
        return no_worker_message(self.name, self.queue)


def no_worker_message(name: str, queue: str) -> str:
    """``no live worker serves NAME``, with the queue."""
    return f"no live worker serves {name} (queue {queue})"


def is_served(workers: Sequence[WorkerRecord], queue: str, name: str) -> bool:
    """Whether one of the live ``workers`` claims ``name`` from ``queue``."""
    return any(w.live and w.serves(queue, name) for w in workers)


def unserved(backlog: Iterable[BacklogRecord], workers: Sequence[WorkerRecord]) -> list[Unserved]:
    """The pending work of ``backlog`` that none of the live ``workers`` serves."""
    return [
        Unserved(row.queue, row.name, row.count, row.oldest)
        for row in backlog
        if row.status is WorkflowStatus.PENDING and not is_served(workers, row.queue, row.name)
    ]


@dataclass(frozen=True, slots=True)
class ErrorCount:
    """How many workflows of one name ended with one error type (``None``: an error with
    no type, or none recorded)."""

    name: str
    error_type: str | None
    count: int
    latest: datetime
    """When the newest of them was last updated."""


@dataclass(frozen=True, slots=True)
class Activity:
    """What one queue did over a window: the workflows created in it, how soon they
    started, and those that ended in it, by outcome."""

    queue: str
    created: int = 0
    started: int = 0
    """Of those created in the window, how many a worker has taken."""
    start_latency_avg: float | None = None
    """Seconds from creation to first start, on average, of those; ``None``: none started."""
    start_latency_max: float | None = None
    ended: dict[str, int] = field(default_factory=dict)
    """Outcome (``succeeded``, ``failed``, ``cancelled``) -> workflows that ended in the window."""

    @property
    def finished(self) -> int:
        """How many ended in the window, whatever their outcome."""
        return sum(self.ended.values())

    @property
    def failure_rate(self) -> float | None:
        """The share of those that ended which failed (``None``: none ended)."""
        return (
            self.ended.get(WorkflowStatus.FAILED.value, 0) / self.finished
            if self.finished
            else None
        )
