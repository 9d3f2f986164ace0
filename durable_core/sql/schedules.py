"""The schedule operations of the shared SQL store (the ``workflow_schedules`` table).

:class:`ScheduleOperations` is part of :class:`~durable_core.sql.store.SQLStore`.
Firing a schedule is one transaction: a conditional UPDATE moves the next tick
on only if it still holds the tick the worker read, and only then are the
tick's workflows enqueued (with ids derived from the tick, so a repeat is
skipped). Of several workers reading the same tick, one fires it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..definitions.schedules import Overlap, ScheduleRecord
from ..errors import StoreError
from ..seams.records import NewWorkflow
from . import schema
from .base import SQLStoreBase
from .connector import Row
from .dialect import SQLDialect
from .errors import Failure
from .rules import param

sc = schema.workflow_schedules

SKIP, CATCH_UP = "skip", "catch_up"
"""The ``missed`` column: what becomes of ticks missed while no worker ran."""

_DEFINITION = (
    "workflow_name",
    "cron",
    "timezone",
    "input",
    "queue",
    "catch_up",
    "next_tick",
    "overlap",
)


def _definition_params(record: ScheduleRecord) -> dict[str, Any]:
    """The parameters of :attr:`ScheduleStatements.add` and ``update``: each column's value
    under ``new_<column>`` (a parameter named like a column would set it in any UPDATE)."""
    values = {
        "workflow_name": record.workflow_name,
        "cron": record.cron,
        "timezone": record.timezone,
        "input": record.input,
        "queue": record.queue,
        "catch_up": record.catch_up,
        "missed": CATCH_UP if record.catch_up else SKIP,
        "next_tick": record.next_tick,
        "overlap": record.overlap.value,
        "paused": record.paused,
    }
    return {"sched": record.name, **{f"new_{name}": value for name, value in values.items()}}


def schedule_from_row(row: Row) -> ScheduleRecord:
    """A :class:`ScheduleRecord` from a ``workflow_schedules`` row."""
    return ScheduleRecord(
        name=row["name"],
        workflow_name=row["workflow_name"],
        cron=row["cron"],
        timezone=row["timezone"],
        input=row["input"],
        queue=row["queue"],
        paused=bool(row["paused"]),
        catch_up=int(row["catch_up"]) if row["missed"] == CATCH_UP else 0,
        next_tick=row["next_tick"],
        last_tick=row["last_tick"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        overlap=Overlap(row["overlap"]),
        latest_id=row["latest_id"],
        buffered_tick=row["buffered_tick"],
    )


class ScheduleStatements:
    """Every statement on ``workflow_schedules``, built once for one dialect."""

    def __init__(self, dialect: SQLDialect) -> None:
        now = dialect.now()
        named = sc.c.name == param("sched")
        values = {
            name: param(f"new_{name}", sc.c[name].type)
            for name in (*_DEFINITION, "missed", "paused")
        }
        announce = dialect.announce_schedules
        self.add = announce(
            sc.insert().values(name=param("sched"), created_at=now, updated_at=now, **values)
        )
        self.update = announce(
            sc.update()
            .where(named)
            .values(updated_at=now, missed=values["missed"], **{k: values[k] for k in _DEFINITION})
        )
        self.get = sa.select(sc).where(named)
        self.list = sa.select(sc).order_by(sc.c.name)
        self.set_paused = announce(
            sc.update()
            .where(named)
            .values(
                paused=values["paused"],
                next_tick=sa.func.coalesce(param("resume_at", sc.c.next_tick.type), sc.c.next_tick),
                updated_at=now,
            )
        )
        self.delete = sc.delete().where(named)
        unpaused = sc.c.paused == sa.false()
        self.due = (
            sa.select(sc)
            .where(unpaused, sc.c.next_tick <= param("at", sc.c.next_tick.type))
            .order_by(sc.c.next_tick)
            .limit(param("limit", sa.Integer()))
        )
        self.next_tick = sa.select(sa.func.min(sc.c.next_tick).label("soonest")).where(unpaused)
        self.advance = (
            sc.update()
            .where(named, unpaused, sc.c.next_tick == param("expected", sc.c.next_tick.type))
            .values(
                next_tick=values["next_tick"],
                last_tick=sa.func.coalesce(param("fired", sc.c.last_tick.type), sc.c.last_tick),
                latest_id=sa.func.coalesce(param("latest", sc.c.latest_id.type), sc.c.latest_id),
                updated_at=now,
            )
        )


class ScheduleOperations(SQLStoreBase):
    """Add, read, pause, delete and fire schedules (mixed into ``SQLStore``)."""

    _schedule_statements: ScheduleStatements | None = None

    @property
    def _sq(self) -> ScheduleStatements:
        if self._schedule_statements is None:
            self._schedule_statements = ScheduleStatements(self.dialect)
        return self._schedule_statements

    async def add_schedule(self, schedule: ScheduleRecord) -> bool:
        """Insert ``schedule`` unless one has its name; whether it was inserted."""
        params = _definition_params(schedule)
        try:
            await self._execute("add_schedule", self._sq.add, params)
        except StoreError as exc:
            # A plain INSERT: an upsert's row count cannot tell a skipped row on MySQL.
            if self.connector.classify(exc.__cause__ or exc) is Failure.DUPLICATE:
                return False
            raise
        return True

    async def update_schedule(self, schedule: ScheduleRecord) -> bool:
        """Replace what the schedule of that name starts and when (its next tick included;
        not whether it is paused); whether it exists."""
        params = _definition_params(schedule)
        return await self._execute("update_schedule", self._sq.update, params) == 1

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule named ``name``, or ``None``."""
        rows = await self._fetch("get_schedule", self._sq.get, {"sched": name})
        return schedule_from_row(rows[0]) if rows else None

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        rows = await self._fetch("list_schedules", self._sq.list, {})
        return [schedule_from_row(row) for row in rows]

    async def set_schedule_paused(
        self, name: str, paused: bool, *, next_tick: datetime | None = None
    ) -> bool:
        """Pause or resume a schedule (moving its next tick to ``next_tick`` if given);
        whether it exists."""
        params = {"sched": name, "new_paused": paused, "resume_at": next_tick}
        return await self._execute("set_schedule_paused", self._sq.set_paused, params) == 1

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule (the workflows it started stay); whether it existed."""
        return await self._execute("delete_schedule", self._sq.delete, {"sched": name}) == 1

    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        """Unpaused schedules whose next tick is at or before ``now``, soonest first."""
        params = {"at": now, "limit": limit}
        rows = await self._fetch("due_schedules", self._sq.due, params)
        return [schedule_from_row(row) for row in rows]

    async def next_schedule_tick(self) -> datetime | None:
        """The soonest next tick of any unpaused schedule."""
        [row] = await self._fetch("next_schedule_tick", self._sq.next_tick, {})
        soonest: datetime | None = row["soonest"]
        return soonest

    async def fire_schedule(
        self,
        name: str,
        *,
        expected: datetime,
        next_tick: datetime,
        fired: datetime | None,
        workflows: Sequence[NewWorkflow],
    ) -> bool:
        """If the schedule is unpaused and its next tick is still ``expected``, move it to
        ``next_tick`` (``fired`` the last tick started; the last of ``workflows`` its latest
        run) and enqueue ``workflows``, in one transaction. ``False`` when another worker
        fired it first (or it was paused)."""
        params = {
            "sched": name,
            "expected": expected,
            "new_next_tick": next_tick,
            "fired": fired,
            "latest": workflows[-1].id if workflows else None,
        }
        async with self._transaction("fire_schedule") as session:
            if await session.execute(self._sq.advance, self.dialect.bind_clock(params)) != 1:
                return False
            if workflows:
                await self._enqueue_in(session, workflows)
        return True
