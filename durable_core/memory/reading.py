"""The memory store's read side: rows, lists, steps, tries, attempts, the backlog, the
operator's counts and groupings, the worker registry.

Lists are filtered and ordered as :mod:`durable_core.sql.listing` writes them (newest
first by ``created_at`` then id); rows are read by :mod:`durable_core.sql.rows`, so a
corrupt one is reported as on a SQL store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..seams.operators import Activity, ErrorCount, WorkerRecord, WorkflowFilter
from ..seams.records import (
    AttemptRecord,
    BacklogRecord,
    EndedAttempts,
    StepRecord,
    StepTryRecord,
    WorkflowRecord,
    WorkflowStatus,
)
from ..sql.rows import (
    attempt_from_row,
    record_from_row,
    step_from_row,
    step_try_from_row,
    workflow_status,
)
from .admin import RETRYABLE, AdminOperations
from .tables import Row, Tables, error_type, matches, newest_first, now

UNFINISHED = tuple(s.value for s in WorkflowStatus if not s.is_terminal)
FORGET_AFTER = timedelta(days=1)
"""A gone worker's row is forgotten this long after it expired (``sql.workers``)."""


def given_filters(**given: Any) -> dict[str, Any]:
    """The list filters that are set (``None``: not given), by name."""
    return {key: value for key, value in given.items() if value is not None}


class ReadOperations(AdminOperations):
    """Read workflows, their steps and attempts; count, group and walk them."""

    def _listed(self, t: Tables, filters: Mapping[str, Any], limit: int) -> list[Row]:
        cursor = t.workflows.get(filters["before"]) if "before" in filters else None
        rows = [row for row in t.workflows.values() if matches(row, filters, cursor)]
        return newest_first(rows)[: max(limit, 0)]

    async def get_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """One workflow row, or ``None``."""
        t = await self._begin()
        with t.lock:
            row = t.workflows.get(workflow_id)
            return None if row is None else record_from_row(row)

    async def list_workflows(
        self,
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
    ) -> list[WorkflowRecord]:
        """The newest workflows first, optionally filtered (see ``Store.list_workflows``)."""
        filters = given_filters(
            status=status,
            name=name,
            queue=queue,
            parent_id=parent_id,
            error_type=error_type,
            created_after=created_after,
            created_before=created_before,
            before=before,
        )
        t = await self._begin()
        with t.lock:
            return [record_from_row(row) for row in self._listed(t, filters, limit)]

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        """Every step of a workflow, by index, with when each began and ended."""
        return await self.load_steps_page(workflow_id, first=0, limit=2**62)

    async def load_steps_page(
        self, workflow_id: str, *, first: int, limit: int
    ) -> list[StepRecord]:
        """The steps of a workflow from index ``first`` on, at most ``limit``, by index."""
        t = await self._begin()
        with t.lock:
            steps = sorted(t.steps.get(workflow_id, {}).items())
            page = [step for index, step in steps if index >= first][: max(limit, 0)]
            return [
                replace(
                    step_from_row(workflow_id, step),
                    started_at=step["started_at"],
                    completed_at=step["completed_at"],
                )
                for step in page
            ]

    async def load_step_tries(self, workflow_id: str) -> list[StepTryRecord]:
        """Every failed try of a workflow's steps, oldest first."""
        t = await self._begin()
        with t.lock:
            return [step_try_from_row(row) for row in t.step_tries.get(workflow_id, ())]

    async def load_attempts(self, workflow_id: str) -> list[AttemptRecord]:
        """Every ended attempt of a workflow, oldest first."""
        t = await self._begin()
        with t.lock:
            return [attempt_from_row(a) for a in t.attempts if a["workflow_id"] == workflow_id]

    async def count_ended_attempts(self, after: int | None) -> EndedAttempts:
        """The attempts ended since the cursor ``after``, by queue and outcome."""
        t = await self._begin()
        with t.lock:
            upto = t.attempts[-1]["seq"] if t.attempts else 0
            if after is None or upto <= after:
                return EndedAttempts(cursor=upto)
            counts: Counter[tuple[str, str]] = Counter()
            for ended in t.attempts:
                row = t.workflows.get(ended["workflow_id"])
                if ended["seq"] > after and row is not None:
                    counts[(row["queue"], ended["outcome"])] += 1
        return EndedAttempts(cursor=upto, counts=dict(counts))

    async def backlog(self) -> list[BacklogRecord]:
        """Unfinished workflows counted by queue, name and status."""
        t = await self._begin()
        groups: dict[tuple[str, str, str], list[datetime]] = {}
        with t.lock:
            for row in t.workflows.values():
                if row["status"] in UNFINISHED:
                    key = (row["queue"], row["name"], row["status"])
                    groups.setdefault(key, []).append(row["run_at"])
        return [
            BacklogRecord(
                queue=queue,
                name=name,
                status=workflow_status(f"named {name}", status),
                count=len(runs),
                oldest=min(runs),
            )
            for (queue, name, status), runs in sorted(groups.items())
        ]

    # -- an operator's questions -------------------------------------------------------------

    def _covered(
        self, t: Tables, where: WorkflowFilter, statuses: Sequence[WorkflowStatus] | None
    ) -> list[Row]:
        given = where.given()
        wanted = {s.value for s in statuses or ()}
        return [
            row
            for row in t.workflows.values()
            if matches(row, given) and (not wanted or row["status"] in wanted)
        ]

    async def count_workflows(
        self, where: WorkflowFilter, *, statuses: Sequence[WorkflowStatus] | None = None
    ) -> int:
        """How many workflows ``where`` covers (of ``statuses`` only, when given)."""
        t = await self._begin()
        with t.lock:
            return len(self._covered(t, where, statuses))

    async def workflow_ids(
        self,
        where: WorkflowFilter,
        *,
        statuses: Sequence[WorkflowStatus] | None = None,
        after: str = "",
        limit: int = 500,
    ) -> list[str]:
        """The ids ``where`` covers (of ``statuses`` only), in id order after ``after``."""
        t = await self._begin()
        with t.lock:
            ids = sorted(row["id"] for row in self._covered(t, where, statuses))
        return [i for i in ids if i > after][: max(limit, 0)]

    async def retry_workflows(
        self, where: WorkflowFilter, *, after: str = "", limit: int = 500
    ) -> list[str]:
        """Retry the next ``limit`` failed or cancelled workflows ``where`` covers, in id
        order after ``after``, at once; the ids retried."""
        statuses = [WorkflowStatus(s) for s in RETRYABLE]
        t = await self._begin()
        with t.lock:
            ids = sorted(row["id"] for row in self._covered(t, where, statuses))
            chosen = [i for i in ids if i > after][: max(limit, 0)]
            at = now()
            return [i for i in chosen if self._retry(t, i, at)]

    async def error_counts(self, where: WorkflowFilter, *, limit: int = 50) -> list[ErrorCount]:
        """The workflows ``where`` covers that recorded an error, counted by name and error
        type, the most frequent first."""
        groups: dict[tuple[str, str | None], list[datetime]] = {}
        t = await self._begin()
        with t.lock:
            for row in self._covered(t, where, None):
                if row["error"] is not None:
                    key = (row["name"], error_type(row["error"]))
                    groups.setdefault(key, []).append(row["updated_at"])
        counted = [
            ErrorCount(name, kind, len(times), max(times)) for (name, kind), times in groups.items()
        ]
        counted.sort(key=lambda c: (-c.count, c.name, c.error_type or ""))
        return counted[: max(limit, 0)]

    async def activity(self, window_seconds: float) -> list[Activity]:
        """Per queue, over the last ``window_seconds``: the workflows created, how soon those
        started, and the workflows that ended, by outcome."""
        queues: dict[str, dict[str, Any]] = {}
        t = await self._begin()
        with t.lock:
            since = now() - timedelta(seconds=float(window_seconds))
            for row in t.workflows.values():
                if row["created_at"] >= since:
                    mine = queues.setdefault(row["queue"], {"created": 0, "waits": []})
                    mine["created"] += 1
                    if row["started_at"] is not None:
                        waited = (row["started_at"] - row["created_at"]).total_seconds()
                        mine["waits"].append(max(waited, 0.0))
                if row["completed_at"] is not None and row["completed_at"] >= since:
                    ended = queues.setdefault(row["queue"], {}).setdefault("ended", {})
                    ended[row["status"]] = ended.get(row["status"], 0) + 1
        found = []
        for queue, values in sorted(queues.items()):
            waits = values.pop("waits", [])
            if "created" in values:
                values["started"] = len(waits)
                values["start_latency_avg"] = sum(waits) / len(waits) if waits else None
                values["start_latency_max"] = max(waits) if waits else None
            found.append(Activity(queue, **values))
        return found

    # -- the worker registry -----------------------------------------------------------------

    async def beat_worker(self, worker: WorkerRecord, ttl_seconds: float) -> None:
        """Write ``worker``'s row, live for ``ttl_seconds`` from now; forget the rows of
        workers gone for a day."""
        t = await self._begin()
        with t.lock:
            at = now()
            for gone in [
                w for w, row in t.workers.items() if row["expires_at"] < at - FORGET_AFTER
            ]:
                del t.workers[gone]
            t.workers[worker.worker_id] = {
                "worker": replace(worker, heartbeat_at=at, live=True),
                "expires_at": at + timedelta(seconds=float(ttl_seconds)),
            }

    async def leave_worker(self, worker_id: str) -> None:
        """Mark the worker gone now (its row stays, expired, for a day)."""
        t = await self._begin()
        with t.lock:
            row = t.workers.get(worker_id)
            if row is not None:
                at = now()
                row["worker"] = replace(row["worker"], heartbeat_at=at, in_flight=0)
                row["expires_at"] = at

    async def list_workers(self, *, gone_within_seconds: float = 0.0) -> list[WorkerRecord]:
        """The live workers, and those gone within the last ``gone_within_seconds``, by id."""
        t = await self._begin()
        with t.lock:
            at = now()
            since = at - timedelta(seconds=float(gone_within_seconds))
            return [
                replace(row["worker"], expires_at=row["expires_at"], live=row["expires_at"] > at)
                for _, row in sorted(t.workers.items())
                if row["expires_at"] > since
            ]

    async def end_dead_leases(self) -> dict[str, int]:
        """Nothing: a memory store has no sessions whose end tells a worker died."""
        return {}
