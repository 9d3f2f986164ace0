"""Schedules: cron expressions in a time zone, and which ticks start a workflow.

A schedule's row keeps its next tick. A worker's scheduler (see
:mod:`durable_core.runtime.scheduler`) starts the workflows of the ticks that are due
and moves the next tick on, in one conditional write, so each tick starts one
workflow however many workers run. The expressions are evaluated by
`croniter <https://pypi.org/project/croniter/>`_ in the schedule's
:mod:`zoneinfo` time zone: five fields (minute to weekday), or six with the
second first, or ``@hourly``-style nicknames.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from ..errors import ConfigurationError
from .queues import check_queue_name

SCHEDULE_NAMESPACE = uuid.UUID("0b6a4f0e-3d7c-4d0a-9c55-61f0a3e2b7d4")
"""The ids of scheduled workflows, derived from the schedule's name and the tick, live here."""

MISSED_AFTER = timedelta(seconds=10)
"""A tick that no worker reached within this long is missed (a worker was not running):
``catch_up`` says how many of those still start."""

MAX_SCHEDULE_NAME = 255

SCHEDULE_HEADER = "durable-schedule"
TICK_HEADER = "durable-schedule-tick"
"""The headers of a workflow a schedule started: the schedule's name, the tick (ISO 8601)."""

SCHEDULED_AT = "scheduled_at"
"""A scheduled workflow declaring a parameter of this name receives its tick there."""


def scheduled_at(headers: Mapping[str, str] | None) -> datetime | None:
    """The tick a schedule started a workflow for, from its headers (``None``: not
    started by a schedule)."""
    tick = (headers or {}).get(TICK_HEADER)
    return None if tick is None else datetime.fromisoformat(tick)


@dataclass(frozen=True)
class Cron:
    """A cron expression in a time zone, checked when it is made."""

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        self.zone  # noqa: B018 -- raises for an unknown time zone
        if not croniter.is_valid(self.expression, second_at_beginning=True):
            raise ConfigurationError(
                f"{self.expression!r} is not a cron expression: five fields (minute hour "
                "day month weekday), six with the second first, or @hourly, @daily..."
            )
        try:
            self.next_after(datetime.now(UTC))
        except CroniterBadDateError:
            raise ConfigurationError(
                f"cron expression {self.expression!r} never fires: it names no date that "
                "comes, such as February 30"
            ) from None

    @property
    def zone(self) -> ZoneInfo:
        """The time zone the expression is read in."""
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigurationError(
                f"unknown time zone {self.timezone!r}: give an IANA name such as "
                "'Europe/Paris' or 'UTC'"
            ) from None

    def _iter(self, start: datetime) -> croniter:
        return croniter(self.expression, start.astimezone(self.zone), second_at_beginning=True)

    def after(self, moment: datetime) -> Iterator[datetime]:
        """The ticks strictly after ``moment``, in UTC, in order."""
        ticks = self._iter(moment)
        while True:
            yield ticks.get_next(datetime).astimezone(UTC)

    def before(self, moment: datetime) -> Iterator[datetime]:
        """The ticks strictly before ``moment``, in UTC, newest first."""
        ticks = self._iter(moment)
        while True:
            yield ticks.get_prev(datetime).astimezone(UTC)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment``, in UTC."""
        return next(self.after(moment))


@dataclass(frozen=True)
class Schedule:
    """A schedule as declared: ``@workflow(schedule=Schedule("0 9 * * *", ...))``, or
    through :meth:`~durable_core.caller.client.DurableClient.add_schedule`.

    ``catch_up`` is how many ticks missed while no worker ran still start once one
    does, oldest first (``0``, the default: they are skipped). ``args`` and ``kwargs``
    are the workflow's arguments on every tick.
    """

    cron: str
    timezone: str = "UTC"
    catch_up: int = 0
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    """The queue its workflows are started in (default: the workflow's own)."""

    def __post_init__(self) -> None:
        Cron(self.cron, self.timezone)
        if self.queue is not None:
            check_queue_name(self.queue)
        if not isinstance(self.catch_up, int) or self.catch_up < 0:
            raise ConfigurationError(
                f"catch_up is a number of missed ticks (0 or more), got {self.catch_up!r}"
            )


@dataclass(frozen=True)
class ScheduleRecord:
    """A schedule's row."""

    name: str
    workflow_name: str
    cron: str
    timezone: str
    input: str
    """The workflow's arguments, as JSON."""
    queue: str | None
    paused: bool
    catch_up: int
    """How many missed ticks start late (``0``: missed ticks are skipped)."""
    next_tick: datetime
    last_tick: datetime | None
    created_at: datetime
    updated_at: datetime

    @property
    def timing(self) -> Cron:
        """Its expression and time zone."""
        return Cron(self.cron, self.timezone)

    def same_definition(self, other: ScheduleRecord) -> bool:
        """Whether both start the same workflow with the same input at the same times."""
        return _definition(self) == _definition(other)

    def same_timing(self, other: ScheduleRecord) -> bool:
        """Whether both tick at the same times."""
        return (self.cron, self.timezone) == (other.cron, other.timezone)


def _definition(record: ScheduleRecord) -> tuple[object, ...]:
    return (
        record.workflow_name,
        record.cron,
        record.timezone,
        record.input,
        record.queue,
        record.catch_up,
    )


def check_name(name: str) -> str:
    """``name``, if it can name a schedule."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_SCHEDULE_NAME:
        raise ConfigurationError(
            f"a schedule name is a string of 1 to {MAX_SCHEDULE_NAME} characters, got {name!r}"
        )
    return name


def tick_workflow_id(schedule_name: str, tick: datetime) -> str:
    """The id of the workflow the tick ``tick`` of ``schedule_name`` starts: the same for
    every worker, so the tick's start is idempotent."""
    return str(uuid.uuid5(SCHEDULE_NAMESPACE, f"{schedule_name}/{tick.astimezone(UTC)}"))


@dataclass(frozen=True)
class Plan:
    """What a scheduler does with a schedule at one moment."""

    start: list[datetime]
    """The ticks to start a workflow for, oldest first."""
    skipped_from: datetime | None
    """The first of the missed ticks that start nothing, if any were skipped."""
    next_tick: datetime
    """The schedule's next tick afterwards."""


def plan(schedule: ScheduleRecord, now: datetime) -> Plan:
    """The ticks of ``schedule`` due at ``now``: those less than :data:`MISSED_AFTER` late
    start; of the missed ones, the newest ``catch_up`` start too and the rest are skipped."""
    cron = schedule.timing
    first = schedule.next_tick
    if first > now:
        return Plan([], None, first)
    cutoff = (now - MISSED_AFTER).replace(microsecond=0)
    start: list[datetime] = []
    skipped_from = None
    if first <= cutoff:
        caught: list[datetime] = []
        if schedule.catch_up:
            for tick in cron.before(cutoff + timedelta(seconds=1)):
                if tick < first or len(caught) == schedule.catch_up:
                    break
                caught.append(tick)
        caught.reverse()
        if not caught or caught[0] > first:
            skipped_from = first
        start.extend(caught)
        ticks = cron.after(cutoff)
    else:
        ticks = cron.after(first - timedelta(seconds=1))
    for tick in ticks:
        if tick > now:
            return Plan(start, skipped_from, tick)
        start.append(tick)
    raise AssertionError("unreachable: a cron expression ticks forever")
