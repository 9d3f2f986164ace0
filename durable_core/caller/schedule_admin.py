"""Adding, listing, pausing, resuming, triggering, backfilling and deleting schedules,
from code.

:class:`ScheduleMethods` gives :class:`~durable_core.caller.client.DurableClient` its
schedule methods.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from ..definitions.queues import DEFAULT_QUEUE
from ..definitions.registry import as_workflow, default_registry
from ..definitions.schedules import (
    Overlap,
    Schedule,
    ScheduleRecord,
    admit,
    backfill_ticks,
    check_overlap,
)
from ..durations import utcnow
from ..errors import ConfigurationError, ScheduleConflictError, ScheduleNotFoundError
from ..redaction import get_logger
from ..runtime.config import default_max_attempts
from ..runtime.context import body_effect
from ..runtime.scheduler import latest_running, schedule_record, tick_workflow
from ..seams.plugins import observers
from ..seams.records import NewWorkflow
from ..seams.roles import CallerStore, schedules_of
from ..seams.store import ScheduleOverlaps, WorkerRegistry
from .handle import WorkflowHandle

logger = get_logger("durable_core.scheduler")

BACKFILL_BATCH = 200
"""How many of a backfill's workflows are enqueued in one transaction."""
_RETRIES = 20
"""How often a trigger or a backfill reads its schedule again when a tick or another
caller changed it between its read and its write."""


class ScheduleMethods:
    """The schedule methods of :class:`~durable_core.caller.client.DurableClient`."""

    store: CallerStore

    _write: Callable[[list[NewWorkflow]], Awaitable[None]]
    """Enqueues new rows as the client's starts do (observers, headers)."""

    async def add_schedule(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        schedule: Schedule | str,
    ) -> ScheduleRecord:
        """Start ``fn`` on every tick of ``schedule`` (a :class:`Schedule`, or a cron
        expression read in UTC). Adding the same schedule again changes nothing; another
        one under ``name`` raises :class:`~durable_core.errors.ScheduleConflictError`."""
        spec = schedule if isinstance(schedule, Schedule) else Schedule(schedule)
        row = schedule_record(name, as_workflow(fn), spec)
        if spec.overlap is not Overlap.ALLOW_ALL and not isinstance(self.store, ScheduleOverlaps):
            raise ConfigurationError(
                f"{type(self.store).__name__} keeps no schedule's latest run: overlap "
                f"{spec.overlap.value} needs a store built on durable_core.sql.SQLStore"
            )

        async def add() -> str:
            return json.dumps(await schedules_of(self.store, "a schedule call").add_schedule(row))

        if json.loads(await body_effect("durable.schedule.add", [name], add)):
            return row
        found = await schedules_of(self.store, "a schedule call").get_schedule(name)
        if found is None:  # deleted in between: add it again
            return await self.add_schedule(name, fn, spec)
        if not found.same_definition(row):
            raise ScheduleConflictError(
                f"schedule {name!r} exists already, starting {found.workflow_name} on "
                f"{found.cron!r} ({found.timezone}): delete it first to replace it"
            )
        return found

    async def get_schedule(self, name: str) -> ScheduleRecord:
        """The schedule ``name``; :class:`~durable_core.errors.ScheduleNotFoundError` if none."""
        found = await schedules_of(self.store, "a schedule call").get_schedule(name)
        if found is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        return found

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        return await schedules_of(self.store, "a schedule call").list_schedules()

    async def pause_schedule(self, name: str) -> None:
        """Stop starting workflows on ``name``'s ticks until it is resumed."""

        async def pause() -> str:
            return json.dumps(
                await schedules_of(self.store, "a schedule call").set_schedule_paused(name, True)
            )

        if not json.loads(await body_effect("durable.schedule.pause", [name], pause)):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def resume_schedule(self, name: str) -> None:
        """Start workflows on ``name``'s ticks again, from its next tick after now (the
        ticks it had while paused start nothing)."""

        async def resume() -> str:
            found = await schedules_of(self.store, "a schedule call").get_schedule(name)
            if found is None or not found.paused:
                return json.dumps(found is not None)
            next_tick = found.timing.next_after(utcnow())
            return json.dumps(
                await schedules_of(self.store, "a schedule call").set_schedule_paused(
                    name, False, next_tick=next_tick
                )
            )

        if not json.loads(await body_effect("durable.schedule.resume", [name], resume)):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def trigger_schedule(self, name: str) -> WorkflowHandle[Any] | None:
        """Start the workflow of schedule ``name`` now, as a tick would (paused or not; its
        next tick stays as it is), following its overlap policy: while its latest run has
        not finished, ``SKIP`` starts nothing and ``BUFFER_ONE`` keeps this tick to start
        when that run ends (both return ``None``). It takes its definition's options
        when this process registered the workflow; else the queue a live worker serves
        it from (the first by name), the schedule's own queue winning either way. From a
        workflow body, once per call site."""

        async def trigger() -> str:
            row = await self._trigger(name)
            return json.dumps(None if row is None else [row.id, row.name])

        started = json.loads(await body_effect("durable.schedule.trigger", [name], trigger))
        return None if started is None else WorkflowHandle(self.store, started[0], started[1])

    async def _trigger(self, name: str) -> NewWorkflow | None:
        queue = DEFAULT_QUEUE
        found = await self.get_schedule(name)
        if isinstance(self.store, WorkerRegistry):
            served = sorted(
                q
                for worker in await self.store.list_workers()
                if found.workflow_name in worker.names
                for q in worker.queues
            )
            queue = served[0] if served else queue
        tick = utcnow()
        row = tick_workflow(
            found, tick, default_registry, max_attempts=default_max_attempts(), queue=queue
        )
        if not isinstance(self.store, ScheduleOverlaps):
            await self._write([row])
        elif not await self._start_ticks(name, [tick], found.overlap, lambda _: row):
            logger.info("schedule %s: trigger %s (overlap %s)", name, tick, found.overlap.value)
            return None
        logger.info("schedule %s: triggered workflow %s (%s)", name, row.id, row.name)
        return row

    async def backfill_schedule(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        overlap: Overlap | str = Overlap.ALLOW_ALL,
    ) -> list[str]:
        """Start the workflows of the ticks schedule ``name`` had from ``start`` (included)
        to ``end`` (excluded), a window that has passed, oldest first, paused or not;
        returns the ids this call started. Each tick's workflow has the id the scheduler
        gives that tick, so a backfill run again (or of a tick that fired) starts nothing
        twice. ``overlap`` applies as to ticks due together: ``ALLOW_ALL`` (the default)
        starts one per tick; ``SKIP`` the first only (none while the schedule's latest run
        has not finished); ``BUFFER_ONE`` the first and keeps the second. At most
        :data:`~durable_core.definitions.schedules.MAX_BACKFILL` ticks. From a workflow
        body, once per call site."""
        policy = check_overlap(overlap)

        async def backfill() -> str:
            return json.dumps(await self._backfill(name, start, end, policy))

        window = [name, start.isoformat(), end.isoformat(), policy.value]
        return list(json.loads(await body_effect("durable.schedule.backfill", window, backfill)))

    async def _backfill(
        self, name: str, start: datetime, end: datetime, policy: Overlap
    ) -> list[str]:
        found = await self.get_schedule(name)
        ticks = backfill_ticks(found.timing, start, end, now=utcnow())
        limit = default_max_attempts()

        def row(tick: datetime) -> NewWorkflow:
            return tick_workflow(found, tick, default_registry, max_attempts=limit)

        if policy is not Overlap.ALLOW_ALL:
            if not isinstance(self.store, ScheduleOverlaps):
                raise ConfigurationError(
                    f"{type(self.store).__name__} keeps no schedule's latest run: a backfill "
                    f"with overlap {policy.value} needs a store built on durable_core.sql.SQLStore"
                )
            return await self._start_ticks(name, ticks, policy, row)
        started: list[str] = []
        for at in range(0, len(ticks), BACKFILL_BATCH):
            started += await self._enqueued([row(tick) for tick in ticks[at : at + BACKFILL_BATCH]])
        logger.info(
            "schedule %s: backfill of %d tick(s) from %s to %s started %d workflow(s)",
            name,
            len(ticks),
            start.isoformat(),
            end.isoformat(),
            len(started),
        )
        return started

    async def _start_ticks(
        self,
        name: str,
        ticks: list[datetime],
        overlap: Overlap,
        row: Callable[[datetime], NewWorkflow],
    ) -> list[str]:
        """Start ``ticks`` of schedule ``name`` as ``overlap`` lets them, on the latest run
        read (read again when it changed meanwhile); the ids started."""
        store = self.store
        assert isinstance(store, ScheduleOverlaps)
        for _ in range(_RETRIES):
            found = await self.get_schedule(name)
            admitted = admit(
                overlap,
                ticks,
                running=await latest_running(self.store, found),
                buffered=found.buffered_tick is not None,
            )
            rows = [row(tick) for tick in admitted.start]
            if await store.fire_schedule_overlap(
                name,
                expected=found.next_tick,
                next_tick=found.next_tick,
                paused=found.paused,
                latest=found.latest_id,
                fired=None,
                workflows=rows,
                buffer=admitted.buffer,
            ):
                for new in rows:
                    self._enqueued_event(new)
                return [new.id for new in rows]
        raise ScheduleConflictError(
            f"schedule {name!r} changed {_RETRIES} times while starting its ticks: try again"
        )

    async def _enqueued(self, rows: list[NewWorkflow]) -> list[str]:
        written = set(await self.store.enqueue(rows))
        for row in rows:
            if row.id in written:
                self._enqueued_event(row)
        return [row.id for row in rows if row.id in written]

    @staticmethod
    def _enqueued_event(row: NewWorkflow) -> None:
        observers().durable_workflow_enqueued(
            workflow_id=row.id, workflow_name=row.name, max_attempts=row.max_attempts
        )

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule ``name``; the workflows it started are left as they are."""

        async def delete() -> str:
            return json.dumps(
                await schedules_of(self.store, "a schedule call").delete_schedule(name)
            )

        if not json.loads(await body_effect("durable.schedule.delete", [name], delete)):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
