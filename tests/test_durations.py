"""Durations and deadlines: one rule where each enters, and no stored moment breaks a read."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

import durable_core
from durable_core import (
    ConfigurationError,
    CorruptRecordError,
    DurableClient,
    RegistrationError,
    Registry,
    RetryPolicy,
    WorkflowConfig,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.durations import MAX_DURATION, MAX_SECONDS, deadline, seconds
from durable_core.seams.records import FOREVER
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from durable_mysql import MySQLStore
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.conftest import MYSQL_URL, empty_mysql_database

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.anyio

BAD: dict[str, float | timedelta] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "-1": -1,
    "1e12": 10**12,
    "timedelta.max": timedelta.max,
    "-timedelta": timedelta(seconds=-1),
}
"""Durations no entry point accepts, by name."""

BAD_MOMENTS: dict[str, datetime] = {
    "naive": datetime(2030, 1, 1),
    "in 101 years": datetime.now(UTC) + timedelta(days=101 * 366),
    "datetime.max": datetime.max.replace(tzinfo=UTC),
    "datetime.max-23h": datetime.max.replace(tzinfo=timezone(timedelta(hours=-23))),
    "101 years ago": datetime.now(UTC) - timedelta(days=101 * 366),
}
"""Deadlines no entry point accepts, by name."""

RANGE = "at most 100 years"


def refused(what: str) -> Any:
    """Expect a :class:`ConfigurationError` naming ``what`` and the allowed range."""
    return pytest.raises(ConfigurationError, match=rf"{what}.*{RANGE}")


# -- the rule ---------------------------------------------------------------------------------


def test_the_rule_takes_seconds_and_timedeltas_up_to_the_maximum() -> None:
    assert timedelta(days=36525) == MAX_DURATION and MAX_DURATION.total_seconds() == MAX_SECONDS
    assert seconds(0, "x") == 0.0 and seconds(timedelta(minutes=2), "x") == 120.0
    assert seconds(MAX_DURATION, "x") == seconds(MAX_SECONDS, "x") == MAX_SECONDS
    assert seconds(2.5, "x", allow_zero=False) == 2.5
    for bad in (*BAD.values(), MAX_SECONDS + 1, 10**400, True, "5", None):
        with pytest.raises(ConfigurationError, match=r"^the answer must be a non-negative"):
            seconds(bad, "the answer")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^x must be a positive duration"):
        seconds(timedelta(0), "x", allow_zero=False)
    now = datetime.now(UTC)
    assert deadline(now + MAX_DURATION - timedelta(seconds=1), "m") > now
    assert deadline(now - timedelta(days=3), "m") < now, "a moment passed is a wait over"
    for name, moment in BAD_MOMENTS.items():
        with pytest.raises(ConfigurationError, match=r"^m must be a timezone-aware datetime"):
            deadline(moment, "m")
        assert name


# -- entry points outside a body ---------------------------------------------------------------


@workflow
async def waits_for_nothing() -> str:
    return "done"


@workflow
async def publishes() -> None:
    await durable_core.set_event("ready", True)


def rows(store: SQLiteStore) -> list[tuple[Any, ...]]:
    path = store.engine.url.database
    assert path is not None
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM workflows").fetchall()


@pytest.mark.parametrize("bad", BAD, ids=list(BAD))
async def test_every_entry_point_refuses_a_bad_duration_by_name(
    sqlite_store: SQLiteStore, bad: str
) -> None:
    value = BAD[bad]
    client = DurableClient(sqlite_store)
    handle = await client.start_workflow(publishes)
    assert await WorkflowRunner(sqlite_store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    before = rows(sqlite_store)

    with refused("sleep duration"):
        await durable_core.sleep(value)
    with refused("start_workflow_later delay_seconds"):
        await client.start_workflow_later(value, waits_for_nothing)
    with refused("DurableClient timeout"):
        DurableClient(sqlite_store, timeout=value)
    with refused("with_options timeout"):
        client.with_options(timeout=value)
    with refused("wait_with_timeout timeout"):
        await handle.wait_with_timeout(value)
    with refused("wait_with_options poll"):
        await handle.wait_with_options(poll=value)
    with refused("wait_with_options deadline"):
        await handle.wait_with_options(deadline=value)
    with refused("get_event timeout"):
        await handle.get_event("ready", timeout=value)
    with refused("RetryPolicy: initial_interval"):
        RetryPolicy(initial_interval=value)  # type: ignore[arg-type]
    with refused("RetryPolicy: max_interval"):
        RetryPolicy(max_interval=value)  # type: ignore[arg-type]
    with refused("cleanup seconds"), durable_core.cleanup(value):  # type: ignore[arg-type]
        pass
    with refused("advance by"):
        WorkflowRunner(sqlite_store).clock.advance(value)

    private = Registry()
    for declare, what in (
        (lambda: workflow(timeout=value, registry=private)(waits_for_nothing.fn), "@workflow"),
        (lambda: workflow_step(timeout=value)(waits_for_nothing.fn), "@workflow_step"),
    ):
        with refused(f"{what} timeout") as caught:
            declare()
        assert isinstance(caught.value, RegistrationError), "a declaration error, as before"
    assert private.names() == []
    assert rows(sqlite_store) == before, "nothing written"


async def test_zero_is_no_timeout_where_a_timeout_must_be_positive(
    sqlite_store: SQLiteStore,
) -> None:
    for make, what in (
        (lambda: DurableClient(sqlite_store, timeout=0), "DurableClient timeout"),
        (lambda: DurableClient(sqlite_store).with_options(timeout=timedelta(0)), "with_options"),
        (lambda: workflow(timeout=0, registry=Registry())(waits_for_nothing.fn), "@workflow"),
        (lambda: workflow_step(timeout=0.0)(waits_for_nothing.fn), "@workflow_step"),
    ):
        with pytest.raises(ConfigurationError, match=f"{what}.* must be a positive duration"):
            make()


async def test_the_longest_durations_are_accepted_and_read_back(
    sqlite_or_postgres: Store,
) -> None:
    client = DurableClient(sqlite_or_postgres, timeout=MAX_DURATION)
    later = await client.start_workflow_later(MAX_SECONDS, waits_for_nothing)
    record = await later.info()
    assert record.deadline is not None and record.deadline - record.created_at == MAX_DURATION
    assert (record.run_at - record.created_at).total_seconds() == pytest.approx(MAX_SECONDS)
    listed = await client.list_workflows()
    assert [r.id for r in listed] == [later.id]


@pytest.mark.parametrize("bad", BAD_MOMENTS, ids=list(BAD_MOMENTS))
async def test_sleep_until_refuses_a_moment_out_of_range_by_name(bad: str) -> None:
    with pytest.raises(ConfigurationError, match=r"sleep_until moment must be a timezone-aware"):
        await durable_core.sleep_until(BAD_MOMENTS[bad])


def test_the_worker_settings_are_bounded_too() -> None:
    with pytest.raises(ConfigurationError, match=r"retry_backoff_secs must be at most 3155760000"):
        WorkflowConfig(retry_backoff_secs=10**12).validate()
    with pytest.raises(ConfigurationError, match=r"lock_timeout_secs must be at most"):
        WorkflowConfig(lock_timeout_secs=math.inf).validate()
    clamped = WorkflowConfig.from_env({"WORKFLOW_POLL_INTERVAL_MS": str(10**15)})
    assert clamped.poll_interval == MAX_SECONDS
    assert WorkflowConfig(retry_backoff_secs=MAX_SECONDS).retry_delay(5) == MAX_SECONDS


def test_a_retry_policy_never_waits_longer_than_the_maximum() -> None:
    steep = RetryPolicy(max_attempts=5000, initial_interval=1, backoff_coefficient=10)
    assert steep.delay(2) == 10
    assert steep.delay(400) == steep.delay(4000) == MAX_SECONDS
    assert RetryPolicy(initial_interval=timedelta(minutes=1)).delay(1) == 60  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="backoff_coefficient"):
        RetryPolicy(backoff_coefficient=math.inf)


# -- entry points in a body: the workflow fails at once, naming the argument ------------------


@workflow
async def child_of_waiter() -> str:
    return "child"


@workflow(max_attempts=3)
async def waits_badly(call: str, bad: str) -> None:
    value = BAD.get(bad)
    if call == "sleep":
        await durable_core.sleep(value)  # type: ignore[arg-type]
    elif call == "sleep_until":
        await durable_core.sleep_until(BAD_MOMENTS[bad])
    elif call == "recv":
        await durable_core.recv("topic", timeout=value)
    else:
        child = await durable_core.start_workflow(child_of_waiter)
        await child.wait_with_options(deadline=value)


BODY_CALLS = [
    *(("sleep", bad, "sleep duration") for bad in BAD),
    *(("recv", bad, "recv timeout") for bad in BAD),
    *(("wait", bad, "wait_with_options deadline") for bad in ("inf", "1e12", "timedelta.max")),
    *(("sleep_until", bad, "sleep_until moment") for bad in BAD_MOMENTS),
]


@pytest.mark.parametrize(("call", "bad", "what"), BODY_CALLS)
async def test_a_bad_duration_in_a_body_fails_the_workflow_at_once(
    sqlite_store: SQLiteStore, call: str, bad: str, what: str
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(waits_badly, call, bad)
    runner = WorkflowRunner(sqlite_store)
    assert await runner.run_until_complete(handle) is WorkflowStatus.FAILED
    record = await handle.info()
    error = await handle.error()
    assert error is not None and record.attempts == 1, "not retried as if it were transient"
    assert error["type"].endswith("InvalidDurationError"), error["type"]
    assert what in error["message"] and "must be" in error["message"]


# -- stored moments out of range are read, never break a listing -------------------------------


async def write_raw(store: Store, sql: str, *params: Any) -> None:
    """Run ``sql`` on the store's database behind its back ($1, $2... for parameters)."""
    if isinstance(store, PostgresStore):
        conn = await asyncpg.connect(store.connector.dsn)
        try:
            await conn.execute(sql, *params)
        finally:
            await conn.close()
        return
    assert isinstance(store, SQLiteStore)
    path = store.engine.url.database
    assert path is not None
    with sqlite3.connect(path) as conn:
        conn.execute(sql.replace("$1", "?").replace("$2", "?"), params)


FAR_FUTURE = {"sqlite": "12000-01-01 00:00:00.000000", "postgresql": "12000-01-01 00:00:00+00"}
FAR_PAST = {"sqlite": "0000-06-01 00:00:00.000000", "postgresql": "4000-01-01 00:00:00+00 BC"}


async def test_a_stored_moment_out_of_range_is_read_clamped(sql_store: Store) -> None:
    store = sql_store
    kind = "postgresql" if isinstance(store, PostgresStore) else "sqlite"
    client = DurableClient(store)
    far, fine, old = [await client.start_workflow(waits_for_nothing) for _ in range(3)]
    await write_raw(
        store,
        f"UPDATE workflows SET deadline = '{FAR_FUTURE[kind]}', "
        f"locked_until = '{FAR_FUTURE[kind]}' WHERE id = $1",
        far.id,
    )
    await write_raw(
        store, f"UPDATE workflows SET completed_at = '{FAR_PAST[kind]}' WHERE id = $1", old.id
    )
    listed = {record.id: record for record in await client.list_workflows()}
    assert set(listed) == {far.id, fine.id, old.id}
    assert listed[far.id].deadline == FOREVER and listed[far.id].locked_until == FOREVER
    assert listed[old.id].completed_at == datetime.min.replace(tzinfo=UTC)
    assert listed[fine.id].deadline is None
    assert (await far.info()).deadline == FOREVER
    forked = await client.fork(far.id, from_step=0)
    assert (await forked.info()).deadline is None, "a deadline read as FOREVER is none"
    assert await WorkflowRunner(store).run_until_complete(far) is WorkflowStatus.SUCCEEDED
    assert await far.output() == "done"


async def test_durable_list_reads_a_row_due_past_year_9999(sqlite_store: SQLiteStore) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(waits_for_nothing)
    far = FAR_FUTURE["sqlite"]
    await write_raw(sqlite_store, f"UPDATE workflows SET run_at = '{far}' WHERE id = $1", handle.id)
    url = f"sqlite:///{sqlite_store.engine.url.database}"
    outputs = []
    for args in (["list"], ["list", "--json"], ["show", handle.id]):
        shown = subprocess.run(
            [sys.executable, "-m", "durable_core", *args, "--database-url", url],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert shown.returncode == 0, shown.stderr
        assert handle.id[:8] in shown.stdout
        outputs.append(shown.stdout)
    [listed] = json.loads(outputs[1])
    assert listed["run_at"] is None, "a moment read as FOREVER is never printed as a date"
    assert not [out for out in outputs if "9999" in out]


async def test_a_zero_date_on_mariadb_is_read_as_the_earliest_moment() -> None:
    base = MYSQL_URL.rsplit("/", 1)[-1].split("?")[0]
    store = MySQLStore(await empty_mysql_database(f"{base}_durations"))
    await store.open()
    try:
        await store.apply_schema()
        handle = await DurableClient(store).start_workflow(waits_for_nothing)
        zero = sa.text("UPDATE workflows SET deadline = '0000-00-00 00:00:00' WHERE id = :id")
        async with store.engine.begin() as conn:
            await conn.execute(sa.text("SET SESSION sql_mode = ''"))  # zero dates allowed
            assert (await conn.execute(zero, {"id": handle.id})).rowcount == 1
        [listed] = await store.list_workflows()
        assert listed.deadline == datetime.min.replace(tzinfo=UTC)
    finally:
        await store.close()


async def test_a_stored_moment_that_is_no_date_is_a_corrupt_record(
    sqlite_store: SQLiteStore,
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(waits_for_nothing)
    await write_raw(sqlite_store, "UPDATE workflows SET deadline = 'soon' WHERE id = $1", handle.id)
    with pytest.raises(CorruptRecordError, match="a stored moment is not a date and time: 'soon'"):
        await handle.info()
