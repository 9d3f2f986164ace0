"""Which ticks of a schedule start a workflow at a given moment: explicit times, no store."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from durable_core import ConfigurationError, RegistrationError, Schedule, workflow
from durable_core.definitions.registry import Registry
from durable_core.definitions.schedules import (
    MISSED_AFTER,
    Cron,
    ScheduleRecord,
    plan,
    tick_workflow_id,
)

T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def row(
    cron: str, next_tick: datetime, *, catch_up: int = 0, timezone: str = "UTC"
) -> ScheduleRecord:
    return ScheduleRecord(
        name="s",
        workflow_name="w",
        cron=cron,
        timezone=timezone,
        input="[[], {}]",
        queue=None,
        paused=False,
        catch_up=catch_up,
        next_tick=next_tick,
        last_tick=None,
        created_at=T0,
        updated_at=T0,
    )


def minutes(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


def test_a_tick_not_yet_due_starts_nothing() -> None:
    p = plan(row("* * * * *", T0), T0 - timedelta(seconds=1))
    assert (p.start, p.skipped_from, p.next_tick) == ([], None, T0)


def test_a_due_tick_starts_once_and_the_next_follows() -> None:
    p = plan(row("* * * * *", T0), T0 + timedelta(seconds=3))
    assert (p.start, p.skipped_from, p.next_tick) == (minutes(0), None, T0 + timedelta(minutes=1))


def test_ticks_late_by_less_than_the_missed_limit_all_start() -> None:
    every_second = row("* * * * * *", T0)
    p = plan(every_second, T0 + timedelta(seconds=4, milliseconds=500))
    assert p.start == [T0 + timedelta(seconds=s) for s in range(5)]
    assert p.skipped_from is None and p.next_tick == T0 + timedelta(seconds=5)


def test_missed_ticks_are_skipped_by_default() -> None:
    # No worker ran from 12:00 to 12:10:30: the ticks 12:00..12:10 were missed.
    now = T0 + timedelta(minutes=10, seconds=30)
    p = plan(row("* * * * *", T0), now)
    assert p.start == [] and p.skipped_from == T0
    assert p.next_tick == T0 + timedelta(minutes=11)


def test_catch_up_starts_the_newest_missed_ticks_oldest_first() -> None:
    now = T0 + timedelta(minutes=10, seconds=30)
    p = plan(row("* * * * *", T0, catch_up=3), now)
    assert p.start == minutes(8, 9, 10) and p.skipped_from == T0
    assert p.next_tick == T0 + timedelta(minutes=11)

    everything = plan(row("* * * * *", T0, catch_up=100), now)
    assert everything.start == minutes(*range(11)) and everything.skipped_from is None


def test_catch_up_and_on_time_ticks_together() -> None:
    # Missed until now - MISSED_AFTER; the last few seconds' ticks are on time.
    now = T0 + timedelta(seconds=30)
    p = plan(row("*/5 * * * * *", T0, catch_up=2), now)
    late = [T0 + timedelta(seconds=s) for s in (15, 20)]
    on_time = [T0 + timedelta(seconds=s) for s in (25, 30)]
    assert now - MISSED_AFTER == T0 + timedelta(seconds=20)
    assert p.start == late + on_time and p.skipped_from == T0
    assert p.next_tick == T0 + timedelta(seconds=35)


def test_a_time_zone_moves_the_ticks_with_daylight_saving() -> None:
    nine_in_paris = Cron("0 9 * * *", "Europe/Paris")
    winter = nine_in_paris.next_after(datetime(2026, 3, 28, 0, 0, tzinfo=UTC))
    summer = nine_in_paris.next_after(winter)  # 29 March 2026: clocks go forward
    assert winter == datetime(2026, 3, 28, 8, 0, tzinfo=UTC)
    assert summer == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)
    new_york = Cron("30 17 * * 1-5", "America/New_York")
    friday = new_york.next_after(datetime(2026, 1, 16, 0, 0, tzinfo=UTC))
    assert friday == datetime(2026, 1, 16, 22, 30, tzinfo=UTC)
    assert new_york.next_after(friday) == datetime(2026, 1, 19, 22, 30, tzinfo=UTC)  # Monday
    assert Cron("@hourly").next_after(T0) == T0 + timedelta(hours=1)


def test_each_tick_has_its_own_stable_workflow_id() -> None:
    first, second = tick_workflow_id("s", T0), tick_workflow_id("s", T0 + timedelta(seconds=1))
    assert first == tick_workflow_id("s", T0.astimezone(Cron("* * * * *", "Asia/Tokyo").zone))
    assert first != second and first != tick_workflow_id("other", T0)
    assert len(first) == 36


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not a cron expression"):
        Schedule("61 * * * *")
    with pytest.raises(ConfigurationError, match="unknown time zone 'Mars/Olympus'"):
        Schedule("* * * * *", "Mars/Olympus")
    with pytest.raises(ConfigurationError, match="catch_up"):
        Schedule("* * * * *", catch_up=-1)

    registry = Registry()

    async def report(day: str) -> None: ...

    with pytest.raises(RegistrationError, match="not a cron expression"):
        workflow(schedule="every day", registry=registry)(report)
    with pytest.raises(RegistrationError, match="arguments do not fit"):
        workflow(schedule="0 9 * * *", registry=registry)(report)  # no argument for `day`
    with pytest.raises(RegistrationError, match="schedule_timezone needs a schedule"):
        workflow(schedule_timezone="UTC", registry=registry)(report)
    declared = workflow(
        schedule=Schedule("0 9 * * *", "Europe/Paris", args=("today",)), registry=registry
    )(report)
    assert declared.schedule is not None and declared.schedule.timezone == "Europe/Paris"


def test_a_cron_expression_that_never_fires_is_refused_where_it_is_given() -> None:
    for never in ("0 0 30 2 *", "0 0 31 4 *", "0 0 0 31 11 *"):
        with pytest.raises(ConfigurationError, match=re.escape(f"'{never}' never fires")):
            Schedule(never)
    with pytest.raises(RegistrationError, match="never fires"):

        @workflow(schedule="0 0 30 2 *", registry=Registry())
        async def on_february_30() -> None: ...

    assert Cron("0 0 29 2 *").next_after(T0).day == 29, "a leap day comes"
