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

import enum
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

MAX_BACKFILL = 1000
"""The most ticks one backfill starts (a longer window raises: backfill it in parts)."""

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


class Overlap(enum.StrEnum):
    """What a tick does while the run the schedule started last has not finished (the
    overlap policies of Temporal's Schedules)."""

    SKIP = "skip"
    """Start nothing: the tick is dropped."""
    BUFFER_ONE = "buffer_one"
    """Keep the tick (one at most; later ones are dropped) and start it once the latest
    run finishes."""
    ALLOW_ALL = "allow_all"
    """Start it anyway: runs overlap (the default)."""


def check_overlap(overlap: object) -> Overlap:
    """``overlap`` as an :class:`Overlap` (its value, ``"skip"``, is taken too)."""
    if isinstance(overlap, str) and overlap in Overlap._value2member_map_:
        return Overlap(overlap)
    choices = ", ".join(o.value for o in Overlap)
    raise ConfigurationError(f"overlap is one of {choices}; got {overlap!r}")


@dataclass(frozen=True)
class Admitted:
    """Which of the ticks due together start, under an overlap policy."""

    start: list[datetime]
    buffer: datetime | None
    """The tick kept to start when the latest run finishes."""
    dropped: list[datetime]


def admit(
    overlap: Overlap, ticks: Sequence[datetime], *, running: bool, buffered: bool
) -> Admitted:
    """Of ``ticks`` (due at once, oldest first): those ``overlap`` starts now, the one it
    buffers and those it drops, while the latest run is ``running`` and a tick is
    ``buffered`` already. Ticks due together overlap each other: under ``SKIP`` and
    ``BUFFER_ONE`` the first starts (unless the latest run is running) and the rest wait."""
    if overlap is Overlap.ALLOW_ALL:
        return Admitted(list(ticks), None, [])
    start = [] if running else list(ticks[:1])
    rest = list(ticks[len(start) :])
    buffer = rest.pop(0) if overlap is Overlap.BUFFER_ONE and rest and not buffered else None
    return Admitted(start, buffer, rest)


@dataclass(frozen=True)
class Schedule:
    """A schedule as declared: ``@workflow(schedule=Schedule("0 9 * * *", ...))``, or
    through :meth:`~durable_core.caller.client.DurableClient.add_schedule`.

    ``catch_up`` is how many ticks missed while no worker ran still start once one
    does, oldest first (``0``, the default: they are skipped). ``args`` and ``kwargs``
    are the workflow's arguments on every tick. ``overlap`` is what a tick does while
    the run the schedule started last has not finished (:class:`Overlap`).
    """

    cron: str
    timezone: str = "UTC"
    catch_up: int = 0
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    """The queue its workflows are started in (default: the workflow's own)."""
    overlap: Overlap = Overlap.ALLOW_ALL

    def __post_init__(self) -> None:
        Cron(self.cron, self.timezone)
        object.__setattr__(self, "overlap", check_overlap(self.overlap))
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
    overlap: Overlap = Overlap.ALLOW_ALL
    latest_id: str | None = None
    """The workflow the schedule started last (a tick, a trigger or a buffered tick)."""
    buffered_tick: datetime | None = None
    """The tick kept under ``BUFFER_ONE``, to start once the latest run finishes."""

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
        record.overlap,
    )


def check_name(name: str) -> str:
    """``name``, if it can name a schedule."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_SCHEDULE_NAME:
        raise ConfigurationError(
            f"a schedule name is a string of 1 to {MAX_SCHEDULE_NAME} characters, got {name!r}"
        )
    return name


def backfill_ticks(cron: Cron, start: datetime, end: datetime, *, now: datetime) -> list[datetime]:
    """The ticks of ``cron`` from ``start`` (included) to ``end`` (excluded), oldest first:
    at most :data:`MAX_BACKFILL`, in a window that has passed (``end`` at or before ``now``)."""
    for moment, what in ((start, "start"), (end, "end")):
        if not isinstance(moment, datetime) or moment.tzinfo is None:
            raise ConfigurationError(f"a backfill's {what} is an aware datetime, got {moment!r}")
    if start >= end:
        raise ConfigurationError(f"a backfill window starts before it ends: {start} to {end}")
    if end > now:
        raise ConfigurationError(
            f"a backfill window has passed: it ends at {end}, after now ({now}); the "
            "scheduler starts the ticks to come"
        )
    ticks: list[datetime] = []
    for tick in cron.after(start - timedelta(seconds=1)):
        if tick >= end:
            return ticks
        if tick < start:
            continue
        if len(ticks) == MAX_BACKFILL:
            raise ConfigurationError(
                f"the window {start} to {end} holds more than {MAX_BACKFILL} ticks of "
                f"{cron.expression!r}: backfill it in shorter windows"
            )
        ticks.append(tick)
    raise AssertionError("unreachable: a cron expression ticks forever")


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
