"""The scheduler each worker runs: it starts the workflows of the schedules' due ticks.

Every worker runs one. Each wakes at the soonest next tick, reads the due
schedules and fires each. On a store that announces schedule changes
(:class:`~durable_core.seams.store.ScheduleFeed`: PostgreSQL's ``NOTIFY``) it also
wakes when a schedule is added or changed, and otherwise sleeps (looking again
once a minute at most), so it costs next to nothing while there is no schedule;
on any other store it also wakes after the poll interval, to see schedules added
meanwhile. Firing: the store moves the schedule's next tick on only if no other
worker has (a conditional UPDATE), and starts the tick's workflows in the same
transaction, under ids derived from the schedule and the tick. So each tick
starts exactly one workflow however many workers run. At start a worker saves the
schedules declared with ``@workflow(schedule=...)`` (:func:`save_declared`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio

from .. import outages
from ..codec import encode_arguments
from ..definitions.queues import DEFAULT_QUEUE
from ..definitions.registry import Registry, Workflow, check_arguments
from ..definitions.schedules import (
    SCHEDULE_HEADER,
    TICK_HEADER,
    Cron,
    Overlap,
    Schedule,
    ScheduleRecord,
    admit,
    check_name,
    plan,
    tick_workflow_id,
)
from ..durations import utcnow
from ..errors import FrameworkError, StoreUnavailableError, UnknownWorkflowError
from ..redaction import get_logger
from ..seams.plugins import observers, workflow_headers
from ..seams.records import NewWorkflow
from ..seams.roles import CallerStore, describe
from ..seams.store import ScheduleFeed, ScheduleOverlaps, Store
from .config import WorkflowConfig

logger = get_logger("durable_core.scheduler")

_MIN_WAIT = 0.01
"""Seconds between two looks at a tick that is due but was not fired (lost to a pause)."""
_RECHECK = 60.0
"""Seconds between two looks at the schedules when the store announces their changes
(only in case one announcement was lost without the connection that hears them)."""


class Scheduler:
    """Fires the due ticks of every schedule in a store."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig,
        registry: Registry,
        *,
        worker_id: str,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.config = config
        self.registry = registry
        self.worker_id = worker_id
        self.clock = clock
        self.fired = 0
        """How many ticks this scheduler has started a workflow for."""
        self._changed: anyio.Event | None = None
        self._buffering = False
        """Whether a buffered tick waits for a run to end (then the poll interval bounds
        each sleep: a run's end is not announced)."""
        # Registered now, before the worker's first claim opens the LISTEN connection.
        self._announced = isinstance(store, ScheduleFeed) and store.on_schedule_change(
            self._on_change
        )

    def _on_change(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def run(self) -> None:
        """Fire due ticks until cancelled; a failing store is retried at the poll interval."""
        while True:
            # A change announced from here on (while reading, too) cuts the sleep short.
            self._changed = changed = anyio.Event()
            try:
                await self.fire_due()
                wait = await self.seconds_to_next_tick()
                outages.reachable(describe(self.store), "the scheduler")
            except StoreUnavailableError as exc:
                outages.unreachable(describe(self.store), "the scheduler", exc)
                wait = self.config.poll_interval
            except FrameworkError as exc:
                logger.error("scheduler: %s", exc, extra=self._fields())
                wait = self.config.poll_interval
            with anyio.move_on_after(wait):
                await changed.wait()

    async def seconds_to_next_tick(self) -> float:
        """How long to sleep: until the soonest tick; at most the poll interval on a store
        that does not announce schedule changes."""
        soonest = await self.store.next_schedule_tick()
        polled = not self._announced or self._buffering
        longest = self.config.poll_interval if polled else _RECHECK
        if soonest is None:
            return longest
        return max(_MIN_WAIT, min(longest, (soonest - self.clock()).total_seconds()))

    async def fire_due(self) -> int:
        """Fire every schedule due now; how many workflows this call started."""
        now = self.clock()
        started = 0
        for schedule in await self.store.due_schedules(now):
            started += await self.fire(schedule, now)
        return started + await self.release_buffered()

    async def release_buffered(self) -> int:
        """Start the buffered tick of every schedule whose latest run has ended; how many
        this call started."""
        if not isinstance(self.store, ScheduleOverlaps):
            return 0
        started, waiting = 0, False
        for schedule, status in await self.store.buffered_schedules():
            tick = schedule.buffered_tick
            assert tick is not None
            if status is not None and not status.is_terminal:
                waiting = True
                continue
            row = self._workflow(schedule, tick)
            if await self.store.release_buffered_tick(
                schedule.name, tick=tick, latest=schedule.latest_id, workflow=row
            ):
                started += 1
                self._started(schedule, tick, row, "buffered tick")
            else:
                waiting = True  # changed meanwhile: look again
        self._buffering = waiting
        self.fired += started
        return started

    async def fire(self, schedule: ScheduleRecord, now: datetime) -> int:
        """Start the workflows of ``schedule``'s ticks due at ``now``, unless another worker
        has; how many this call started."""
        ticks = plan(schedule, now)
        starting, buffer = ticks.start, None
        if schedule.overlap is Overlap.ALLOW_ALL or not isinstance(self.store, ScheduleOverlaps):
            rows = [self._workflow(schedule, tick) for tick in starting]
            fired = await self.store.fire_schedule(
                schedule.name,
                expected=schedule.next_tick,
                next_tick=ticks.next_tick,
                fired=starting[-1] if starting else None,
                workflows=rows,
            )
        else:
            admitted = admit(
                schedule.overlap,
                ticks.start,
                running=await latest_running(self.store, schedule),
                buffered=schedule.buffered_tick is not None,
            )
            starting, buffer = admitted.start, admitted.buffer
            rows = [self._workflow(schedule, tick) for tick in starting]
            fired = await self.store.fire_schedule_overlap(
                schedule.name,
                expected=schedule.next_tick,
                next_tick=ticks.next_tick,
                paused=False,
                latest=schedule.latest_id,
                fired=starting[-1] if starting else None,
                workflows=rows,
                buffer=buffer,
            )
            if fired and admitted.dropped:
                logger.info(
                    "schedule %s: overlap %s dropped %d tick(s) from %s on",
                    schedule.name,
                    schedule.overlap.value,
                    len(admitted.dropped),
                    admitted.dropped[0].isoformat(),
                    extra=self._fields(schedule=schedule.name),
                )
        if not fired:
            return 0
        if buffer is not None:
            self._buffering = True
        if ticks.skipped_from is not None:
            logger.warning(
                "schedule %s: skipped the ticks missed from %s on (catch_up=%d)",
                schedule.name,
                ticks.skipped_from.isoformat(),
                schedule.catch_up,
                extra=self._fields(schedule=schedule.name),
            )
        for tick, row in zip(starting, rows, strict=True):
            self._started(schedule, tick, row, "tick")
        self.fired += len(rows)
        return len(rows)

    def _started(
        self, schedule: ScheduleRecord, tick: datetime, row: NewWorkflow, what: str
    ) -> None:
        observers().durable_workflow_enqueued(
            workflow_id=row.id, workflow_name=row.name, max_attempts=row.max_attempts
        )
        logger.info(
            "schedule %s: %s %s started workflow %s (%s)",
            schedule.name,
            what,
            tick.isoformat(),
            row.id,
            row.name,
            extra=self._fields(schedule=schedule.name, workflow_id=row.id),
        )

    def _workflow(self, schedule: ScheduleRecord, tick: datetime) -> NewWorkflow:
        """The workflow a tick starts: its headers name the schedule and the tick."""
        return tick_workflow(schedule, tick, self.registry, max_attempts=self.config.max_attempts)

    def _fields(self, **more: str) -> dict[str, str]:
        return {"worker_id": self.worker_id, **more}


async def latest_running(store: CallerStore, schedule: ScheduleRecord) -> bool:
    """Whether the workflow ``schedule`` started last exists and has not finished."""
    if schedule.latest_id is None:
        return False
    latest = await store.get_workflow(schedule.latest_id)
    return latest is not None and not latest.status.is_terminal


def tick_workflow(
    schedule: ScheduleRecord,
    tick: datetime,
    registry: Registry,
    *,
    max_attempts: int,
    queue: str = DEFAULT_QUEUE,
) -> NewWorkflow:
    """The workflow ``schedule``'s tick ``tick`` starts, its headers naming the schedule and
    the tick (beside those observers add: a trace context): with its definition's attempt
    budget, timeout and queue when ``registry`` knows it, else with ``max_attempts`` and
    ``queue`` (another worker may run it); the schedule's own queue wins."""
    timeout = None
    try:
        definition = registry.get(schedule.workflow_name)
    except UnknownWorkflowError:
        pass
    else:
        max_attempts = definition.max_attempts or max_attempts
        timeout, queue = definition.timeout, definition.queue
    workflow_id = tick_workflow_id(schedule.name, tick)
    headers = workflow_headers(workflow_id, schedule.workflow_name)
    return NewWorkflow(
        id=workflow_id,
        name=schedule.workflow_name,
        input=schedule.input,
        max_attempts=max_attempts,
        timeout_seconds=timeout,
        queue=schedule.queue or queue,
        headers={**headers, SCHEDULE_HEADER: schedule.name, TICK_HEADER: tick.isoformat()},
    )


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
        overlap=schedule.overlap,
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
