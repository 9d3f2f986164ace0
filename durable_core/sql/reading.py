"""The read side of the shared SQL store: rows, lists, steps, attempts and counts."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from ..seams.records import (
    AttemptRecord,
    BacklogRecord,
    EndedAttempts,
    StepRecord,
    StepTryRecord,
    WorkflowRecord,
    WorkflowStatus,
)
from .base import SQLStoreBase
from .listing import filter_params
from .rows import (
    attempt_from_row,
    record_from_row,
    step_from_row,
    step_try_from_row,
    workflow_status,
)


class ReadOperations(SQLStoreBase):
    """Read workflows, their steps and attempts, and count what is left (part of ``SQLStore``)."""

    async def get_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """One workflow row, or ``None``."""
        rows = await self._fetch("get_workflow", self.statements.get, {"workflow": workflow_id})
        return record_from_row(rows[0]) if rows else None

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
        given = {
            "status": status,
            "name": name,
            "queue": queue,
            "parent_id": parent_id,
            "error_type": error_type,
            "created_after": created_after,
            "created_before": created_before,
            "before": before,
        }
        filters = {key: value for key, value in given.items() if value is not None}
        query = self.statements.list_workflows(frozenset(filters))
        params: dict[str, Any] = {"limit": limit, **filter_params(filters)}
        if self._plan_for_values is None or not filters:
            rows = await self._fetch("list_workflows", query, params)
        else:
            # A rare name or status is found through its own index, a common one by walking
            # the creation order: only a plan made for the values can tell which it is.
            async with self._transaction("list_workflows") as session:
                await session.execute(self._plan_for_values)
                rows = await session.fetch(query, self.dialect.bind_clock(params))
        return [record_from_row(row) for row in rows]

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        """Every step of a workflow, by index, with when each began and ended."""
        params = {"workflow": workflow_id}
        rows = await self._fetch("load_steps", self.statements.load_steps, params)
        return [
            replace(
                step_from_row(workflow_id, row),
                started_at=row["started_at"],
                completed_at=row["completed_at"],
            )
            for row in rows
        ]

    async def load_step_tries(self, workflow_id: str) -> list[StepTryRecord]:
        """Every failed try of a workflow's steps, oldest first."""
        params = {"workflow": workflow_id}
        rows = await self._fetch("load_step_tries", self.statements.load_step_tries, params)
        return [step_try_from_row(row) for row in rows]

    async def count_ended_attempts(self, after: int | None) -> EndedAttempts:
        """The attempts ended since the cursor ``after``, by queue and outcome."""
        q = self.statements
        rows = await self._fetch("count_ended_attempts", q.last_attempt, {})
        upto = int(rows[0]["seq"] or 0)
        if after is None or upto <= after:
            return EndedAttempts(cursor=upto)
        params = {"after": after, "upto": upto}
        counted = await self._fetch("count_ended_attempts", q.count_ended, params)
        return EndedAttempts(
            cursor=upto, counts={(row["queue"], row["outcome"]): row["n"] for row in counted}
        )

    async def backlog(self) -> list[BacklogRecord]:
        """Unfinished workflows counted by queue, name and status (one index scan)."""
        rows = await self._fetch("backlog", self.statements.backlog, {})
        return [
            BacklogRecord(
                queue=row["queue"],
                name=row["name"],
                status=workflow_status(f"named {row['name']}", row["status"]),
                count=row["count"],
                oldest=row["oldest"],
            )
            for row in rows
        ]

    async def load_attempts(self, workflow_id: str) -> list[AttemptRecord]:
        """Every ended attempt of a workflow, oldest first."""
        params = {"workflow": workflow_id}
        rows = await self._fetch("load_attempts", self.statements.load_attempts, params)
        return [attempt_from_row(row) for row in rows]
