"""Adding, listing, pausing, resuming and deleting schedules, from code.

:class:`ScheduleMethods` gives :class:`~durable_core.caller.client.DurableClient` its
schedule methods.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..definitions.queues import DEFAULT_QUEUE
from ..definitions.registry import as_workflow, default_registry
from ..definitions.schedules import Schedule, ScheduleRecord
from ..durations import utcnow
from ..errors import ScheduleConflictError, ScheduleNotFoundError
from ..redaction import get_logger
from ..runtime.config import default_max_attempts
from ..runtime.context import body_effect
from ..runtime.scheduler import schedule_record, tick_workflow
from ..seams.records import NewWorkflow
from ..seams.store import Store, WorkerRegistry
from .handle import WorkflowHandle

logger = get_logger("durable_core.scheduler")


class ScheduleMethods:
    """The schedule methods of :class:`~durable_core.caller.client.DurableClient`."""

    store: Store

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

        async def add() -> str:
            return json.dumps(await self.store.add_schedule(row))

        if json.loads(await body_effect("durable.schedule.add", [name], add)):
            return row
        found = await self.store.get_schedule(name)
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
        found = await self.store.get_schedule(name)
        if found is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        return found

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        return await self.store.list_schedules()

    async def pause_schedule(self, name: str) -> None:
        """Stop starting workflows on ``name``'s ticks until it is resumed."""

        async def pause() -> str:
            return json.dumps(await self.store.set_schedule_paused(name, True))

        if not json.loads(await body_effect("durable.schedule.pause", [name], pause)):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def resume_schedule(self, name: str) -> None:
        """Start workflows on ``name``'s ticks again, from its next tick after now (the
        ticks it had while paused start nothing)."""

        async def resume() -> str:
            found = await self.store.get_schedule(name)
            if found is None or not found.paused:
                return json.dumps(found is not None)
            next_tick = found.timing.next_after(utcnow())
            return json.dumps(
                await self.store.set_schedule_paused(name, False, next_tick=next_tick)
            )

        if not json.loads(await body_effect("durable.schedule.resume", [name], resume)):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def trigger_schedule(self, name: str) -> WorkflowHandle[Any]:
        """Start the workflow of schedule ``name`` now, as a tick would (paused or not; its
        next tick stays as it is). It takes its definition's options when this process
        registered the workflow; else the queue a live worker serves it from (the first by
        name), the schedule's own queue winning either way."""
        found = await self.get_schedule(name)
        queue = DEFAULT_QUEUE
        if isinstance(self.store, WorkerRegistry):
            served = sorted(
                q
                for worker in await self.store.list_workers()
                if found.workflow_name in worker.names
                for q in worker.queues
            )
            queue = served[0] if served else queue
        row = tick_workflow(
            found, utcnow(), default_registry, max_attempts=default_max_attempts(), queue=queue
        )
        await self._write([row])
        logger.info("schedule %s: triggered workflow %s (%s)", name, row.id, row.name)
        return WorkflowHandle(self.store, row.id, row.name)

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule ``name``; the workflows it started are left as they are."""

        async def delete() -> str:
            return json.dumps(await self.store.delete_schedule(name))

        if not json.loads(await body_effect("durable.schedule.delete", [name], delete)):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
