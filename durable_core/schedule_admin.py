"""Adding, listing, pausing, resuming and deleting schedules, from code and at worker start.

:class:`ScheduleMethods` gives :class:`~durable_core.client.DurableClient` its
schedule methods; :func:`save_declared` writes the schedules declared with
``@workflow(schedule=...)`` when a worker starts.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from .codec import encode_arguments
from .coltypes import utcnow
from .config import default_max_attempts
from .context import body_effect
from .errors import ScheduleConflictError, ScheduleNotFoundError
from .handle import WorkflowHandle
from .records import DEFAULT_QUEUE, NewWorkflow
from .redaction import get_logger
from .registry import Registry, Workflow, as_workflow, check_arguments, default_registry
from .scheduler import tick_workflow
from .schedules import Cron, Schedule, ScheduleRecord, check_name
from .store import Store, WorkerRegistry

logger = get_logger("durable_core.scheduler")


def schedule_record(name: str, workflow: Workflow[Any, Any], schedule: Schedule) -> ScheduleRecord:
    """The row of a new schedule ``name`` starting ``workflow`` on ``schedule``, its first
    tick the next one from now. Raises unless the arguments fit the workflow."""
    check_name(name)
    check_arguments(workflow, schedule.args, schedule.kwargs, scheduled=True)
    payload = encode_arguments(
        tuple(schedule.args),
        dict(schedule.kwargs),
        what=f"arguments of schedule {name} (workflow {workflow.name})",
    )
    now = utcnow()
    return ScheduleRecord(
        name=name,
        workflow_name=workflow.name,
        cron=schedule.cron,
        timezone=schedule.timezone,
        input=payload,
        queue=schedule.queue,
        paused=False,
        catch_up=schedule.catch_up,
        next_tick=Cron(schedule.cron, schedule.timezone).next_after(now),
        last_tick=None,
        created_at=now,
        updated_at=now,
    )


async def save_declared(store: Store, registry: Registry) -> int:
    """Write every schedule declared with ``@workflow(schedule=...)`` in ``registry``,
    named after its workflow: a new one is added; one whose declaration changed is
    updated (its next tick too when its times changed); a paused one stays paused.
    Returns how many were added or changed."""
    changed = 0
    for name in registry.names():
        definition = registry.get(name)
        if definition.schedule is None:
            continue
        row = schedule_record(definition.name, definition, definition.schedule)
        if await store.add_schedule(row):
            changed += 1
            logger.info("schedule %s added: %s (%s)", row.name, row.cron, row.timezone)
            continue
        found = await store.get_schedule(row.name)
        if found is None or found.same_definition(row):
            continue
        if found.same_timing(row):
            row = ScheduleRecord(**{**row.__dict__, "next_tick": found.next_tick})
        await store.update_schedule(row)
        changed += 1
        logger.info("schedule %s updated: %s (%s)", row.name, row.cron, row.timezone)
    return changed


class ScheduleMethods:
    """The schedule methods of :class:`~durable_core.client.DurableClient`."""

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
