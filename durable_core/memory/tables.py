"""The memory store's tables: every dict it keeps, in one place.

Each table is a plain dict (or list) of rows, and a row is a dict keyed by the column
names of the SQL schema (:mod:`durable_core.sql.schema`), so the SQL stores' row readers
(:mod:`durable_core.sql.rows`) read it and a test can corrupt one column as it would a
database row. A new capability adds its table here, as a field of :class:`Tables`.

Every store operation reads and writes the tables under :attr:`Tables.lock` and without
awaiting in between: that is its transaction (all of it, or none of it when it raises
before its first write). The lock is a thread lock, so two instances on one
:class:`Tables` may run on two event loops (a ``SyncClient`` beside a runner).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..durations import utcnow
from ..seams.records import NewWorkflow, WorkflowStatus

Row = dict[str, Any]
"""One row: column name -> value."""


@dataclass
class Tables:
    """Every table of one memory database; two stores built on one share it."""

    workflows: dict[str, Row] = field(default_factory=dict)
    """By workflow id."""
    steps: dict[str, dict[int, Row]] = field(default_factory=dict)
    """By workflow id, then step index."""
    step_tries: dict[str, list[Row]] = field(default_factory=dict)
    """By workflow id, oldest first: each failed try of a step."""
    attempts: list[Row] = field(default_factory=list)
    """Every ended attempt, in the order they ended (``seq`` is the cursor)."""
    messages: dict[str, list[Row]] = field(default_factory=dict)
    """By workflow id, oldest first (a cancel request is one, on ``durable.cancel``)."""
    events: dict[tuple[str, str], Row] = field(default_factory=dict)
    """By workflow id and key."""
    streams: dict[tuple[str, str], list[Row]] = field(default_factory=dict)
    """By workflow id and key, by offset; a ``None`` value closes the key."""
    updates: dict[str, dict[str, Row]] = field(default_factory=dict)
    """By workflow id, then update id, in the order sent."""
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By workflow id, then name: the value (text, a float or a bool)."""
    schedules: dict[str, Row] = field(default_factory=dict)
    """By schedule name."""
    debounces: dict[tuple[str, str], Row] = field(default_factory=dict)
    """By workflow name and debounce key: the window's run."""
    workers: dict[str, Row] = field(default_factory=dict)
    """By worker id."""
    watches: dict[str, list[Any]] = field(default_factory=dict)
    """By workflow id: the watches its stream writes and update replies wake."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held by each operation while it reads and writes (its transaction)."""
    _seq: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def next_seq(self) -> int:
        """A number above every one handed out before (messages, attempts, tries, updates)."""
        return next(self._seq)


def new_row(row: NewWorkflow, now: datetime) -> Row:
    """The ``workflows`` row of a workflow being started (``sql.rules.new_workflow``)."""
    timeout = row.timeout_seconds
    return {
        "id": row.id,
        "name": row.name,
        "status": WorkflowStatus.PENDING.value,
        "input": row.input,
        "output": None,
        "error": None,
        "attempts": 0,
        "max_attempts": row.max_attempts,
        "run_at": now + timedelta(seconds=float(row.delay_seconds)),
        "created_at": now,
        "updated_at": now,
        "completed_at": None,
        "locked_by": None,
        "lock_token": None,
        "locked_until": None,
        "parent_id": row.parent_id,
        "waiting_for": None,
        "deadline": None if timeout is None else now + timedelta(seconds=float(timeout)),
        "queue": row.queue,
        "priority": row.priority,
        "concurrency_key": row.concurrency_key,
        "started_at": None,
        "headers": None if row.headers is None else json.dumps(dict(row.headers)),
    }


def release(row: Row, now: datetime) -> None:
    """End the row's lease: nobody holds it (``sql.rules.release``)."""
    row.update(locked_by=None, lock_token=None, locked_until=None, updated_at=now)


ERROR_PREFIX = '{"type": "'


def error_type(error: str | None) -> str | None:
    """The type of a recorded error (``builtins.KeyError``), as ``sql.listing.error_type``
    reads it: the text after ``{"type": "`` up to the next quote."""
    if error is None or not error.startswith(ERROR_PREFIX):
        return None
    rest = error[len(ERROR_PREFIX) :]
    cut = rest.find('"')
    return rest if cut < 0 else rest[:cut]


def matches(row: Row, filters: Mapping[str, Any], cursor: Row | None = None) -> bool:
    """Whether ``row`` passes the list filters ``filters`` (``sql.listing.LIST_FILTERS``,
    a status by its value); ``before`` is the id of ``cursor``'s row (missing: none pass)."""
    for name, wanted in filters.items():
        if name == "before":
            if cursor is None:
                return False
            at = cursor["created_at"]
            if not (row["created_at"] < at or (row["created_at"] == at and row["id"] < wanted)):
                return False
        elif name == "created_after":
            if row["created_at"] < wanted:
                return False
        elif name == "created_before":
            if row["created_at"] >= wanted:
                return False
        elif name == "error_type":
            if error_type(row["error"]) != wanted:
                return False
        elif row[name] != getattr(wanted, "value", wanted):
            return False
    return True


def newest_first(rows: list[Row]) -> list[Row]:
    """``rows`` by ``created_at`` then id, newest first (how every list is ordered)."""
    return sorted(rows, key=lambda r: (r["created_at"], r["id"]), reverse=True)


def now() -> datetime:
    """The store's clock: the wall clock, aware UTC (a runner's ``TestClock`` is the
    bodies', not the store's, as on SQLite)."""
    return utcnow()
