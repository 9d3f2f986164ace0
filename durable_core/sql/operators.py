"""The operator queries of the shared SQL store: counts, groupings and bulk actions over a
filter, activity over a window, a page of steps (part of ``SQLStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..seams.operators import Activity, ErrorCount, WorkflowFilter
from ..seams.records import StepRecord, WorkflowStatus
from .base import SQLStoreBase
from .listing import OperatorStatements, filter_params
from .rows import step_from_row
from .statements import RETRYABLE


def _statuses(statuses: Sequence[WorkflowStatus] | None) -> tuple[str, ...]:
    return tuple(sorted(s.value for s in statuses or ()))


class OperatorOperations(SQLStoreBase):
    """What an operator asks of the workflows table, each rule written in
    :class:`~durable_core.sql.statements.OperatorStatements`."""

    _operator_statements: OperatorStatements | None = None

    @property
    def _oq(self) -> OperatorStatements:
        if self._operator_statements is None:
            self._operator_statements = OperatorStatements(self.dialect)
        return self._operator_statements

    async def count_workflows(
        self, where: WorkflowFilter, *, statuses: Sequence[WorkflowStatus] | None = None
    ) -> int:
        """How many workflows ``where`` covers (of ``statuses`` only, when given)."""
        given = where.given()
        query = self._oq.count(frozenset(given), _statuses(statuses))
        rows = await self._fetch("count_workflows", query, filter_params(given))
        return int(rows[0]["n"])

    async def workflow_ids(
        self,
        where: WorkflowFilter,
        *,
        statuses: Sequence[WorkflowStatus] | None = None,
        after: str = "",
        limit: int = 500,
    ) -> list[str]:
        """The ids ``where`` covers (of ``statuses`` only, when given), in id order after
        ``after``, at most ``limit``: the pages a bulk action walks."""
        given = where.given()
        query = self._oq.ids(frozenset(given), _statuses(statuses))
        params = {**filter_params(given), "after": after, "limit": limit}
        rows = await self._fetch("workflow_ids", query, params)
        return [row["id"] for row in rows]

    async def retry_workflows(
        self, where: WorkflowFilter, *, after: str = "", limit: int = 500
    ) -> list[str]:
        """Retry the next ``limit`` failed or cancelled workflows ``where`` covers, in id
        order after ``after``, in one transaction (each as ``retry_workflow`` does); the ids
        retried."""
        given = where.given()
        query = self._oq.ids(frozenset(given), _statuses(RETRYABLE), lock=True)
        params = {**filter_params(given), "after": after, "limit": limit}
        async with self._transaction("retry_workflows") as session:
            rows = await session.fetch(query, self.dialect.bind_clock(params))
            ids = [row["id"] for row in rows]
            if ids:
                bound = [self.dialect.bind_clock({"workflow": i}) for i in ids]
                await session.execute_many(self.statements.retry, bound)
        return ids

    async def error_counts(self, where: WorkflowFilter, *, limit: int = 50) -> list[ErrorCount]:
        """The workflows ``where`` covers that recorded an error, counted by name and error
        type, the most frequent first."""
        given = where.given()
        query = self._oq.error_counts(frozenset(given))
        rows = await self._fetch("error_counts", query, {**filter_params(given), "limit": limit})
        return [
            ErrorCount(row["name"], row["error_type"], int(row["n"]), row["latest"]) for row in rows
        ]

    async def activity(self, window_seconds: float) -> list[Activity]:
        """Per queue, over the last ``window_seconds``: the workflows created, how soon those
        started, and the workflows that ended, by outcome."""
        params = {"window_seconds": -float(window_seconds)}
        created = await self._fetch("activity", self._oq.created, params)
        ended = await self._fetch("activity", self._oq.ended, params)
        queues: dict[str, dict[str, Any]] = {}
        for row in created:
            queues[row["queue"]] = {
                "created": int(row["created"]),
                "started": int(row["started"]),
                "start_latency_avg": _seconds(row["latency_avg"]),
                "start_latency_max": _seconds(row["latency_max"]),
            }
        for row in ended:
            outcomes = queues.setdefault(row["queue"], {}).setdefault("ended", {})
            outcomes[row["status"]] = int(row["n"])
        return [Activity(queue, **values) for queue, values in sorted(queues.items())]

    async def load_steps_page(
        self, workflow_id: str, *, first: int, limit: int
    ) -> list[StepRecord]:
        """The steps of a workflow from index ``first`` on, at most ``limit``, by index."""
        params = {"workflow": workflow_id, "first": first, "limit": limit}
        rows = await self._fetch("load_steps_page", self._oq.steps_page, params)
        return [
            replace(
                step_from_row(workflow_id, row),
                started_at=row["started_at"],
                completed_at=row["completed_at"],
            )
            for row in rows
        ]


def _seconds(value: Any) -> float | None:
    return None if value is None else max(float(value), 0.0)
