"""Schedules' overlap policies in the shared SQL store (``workflow_schedules``, schema 9).

:class:`ScheduleOverlapOperations` is part of :class:`~durable_core.sql.store.SQLStore`.
Each write is one transaction whose conditional UPDATE holds the row as the caller read
it (next tick, paused state, latest run; for a release, the buffered tick): only then
are the workflows enqueued, under ids derived from the schedule and the tick, so of
several workers or callers acting on one reading, one writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from ..definitions.schedules import ScheduleRecord
from ..seams.records import NewWorkflow, WorkflowStatus
from . import schema
from .base import SQLStoreBase
from .dialect import SQLDialect
from .rules import param, wf
from .schedules import schedule_from_row

sc = schema.workflow_schedules


class OverlapStatements:
    """The statements of the overlap policies, built once for one dialect."""

    def __init__(self, dialect: SQLDialect) -> None:
        now = dialect.now()
        named = sc.c.name == param("sched")
        same_latest = sc.c.latest_id.is_not_distinct_from(param("latest", sc.c.latest_id.type))
        tick = sc.c.next_tick.type
        self.fire = dialect.announce_schedules(
            sc.update()
            .where(
                named,
                same_latest,
                sc.c.paused == param("was_paused", sa.Boolean()),
                sc.c.next_tick == param("expected", tick),
            )
            .values(
                next_tick=param("new_next_tick", tick),
                last_tick=sa.func.coalesce(param("fired", tick), sc.c.last_tick),
                latest_id=sa.func.coalesce(
                    param("new_latest", sc.c.latest_id.type), sc.c.latest_id
                ),
                buffered_tick=sa.func.coalesce(sc.c.buffered_tick, param("buffer", tick)),
                updated_at=now,
            )
        )
        self.buffered = (
            sa.select(sc, wf.c.status.label("latest_status"))
            .select_from(sc.outerjoin(wf, wf.c.id == sc.c.latest_id))
            .where(sc.c.buffered_tick.is_not(None), sc.c.paused == sa.false())
            .order_by(sc.c.buffered_tick)
            .limit(param("limit", sa.Integer()))
        )
        self.release = (
            sc.update()
            .where(
                named,
                same_latest,
                sc.c.paused == sa.false(),
                sc.c.buffered_tick == param("tick", tick),
            )
            .values(
                buffered_tick=None,
                latest_id=param("new_latest", sc.c.latest_id.type),
                updated_at=now,
            )
        )


class ScheduleOverlapOperations(SQLStoreBase):
    """Fire a tick on the latest run read, list and release buffered ticks (mixed into
    ``SQLStore``)."""

    _overlap_statements: OverlapStatements | None = None

    @property
    def _ovq(self) -> OverlapStatements:
        if self._overlap_statements is None:
            self._overlap_statements = OverlapStatements(self.dialect)
        return self._overlap_statements

    async def fire_schedule_overlap(
        self,
        name: str,
        *,
        expected: datetime,
        next_tick: datetime,
        paused: bool,
        latest: str | None,
        fired: datetime | None,
        workflows: Sequence[NewWorkflow],
        buffer: datetime | None,
    ) -> bool:
        """See :meth:`~durable_core.seams.store.ScheduleOverlaps.fire_schedule_overlap`."""
        params = {
            "sched": name,
            "expected": expected,
            "was_paused": paused,
            "latest": latest,
            "new_next_tick": next_tick,
            "fired": fired,
            "new_latest": workflows[-1].id if workflows else None,
            "buffer": buffer,
        }
        async with self._transaction("fire_schedule_overlap") as session:
            if await session.execute(self._ovq.fire, self.dialect.bind_clock(params)) != 1:
                return False
            if workflows:
                await self._enqueue_in(session, workflows)
        return True

    async def buffered_schedules(
        self, *, limit: int = 100
    ) -> list[tuple[ScheduleRecord, WorkflowStatus | None]]:
        """See :meth:`~durable_core.seams.store.ScheduleOverlaps.buffered_schedules`."""
        rows = await self._fetch("buffered_schedules", self._ovq.buffered, {"limit": limit})
        return [
            (
                schedule_from_row(row),
                None if row["latest_status"] is None else WorkflowStatus(row["latest_status"]),
            )
            for row in rows
        ]

    async def release_buffered_tick(
        self, name: str, *, tick: datetime, latest: str | None, workflow: NewWorkflow
    ) -> bool:
        """See :meth:`~durable_core.seams.store.ScheduleOverlaps.release_buffered_tick`."""
        params = {"sched": name, "tick": tick, "latest": latest, "new_latest": workflow.id}
        async with self._transaction("release_buffered_tick") as session:
            if await session.execute(self._ovq.release, self.dialect.bind_clock(params)) != 1:
                return False
            await self._enqueue_in(session, [workflow])
        return True
