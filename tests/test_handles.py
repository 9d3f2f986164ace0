"""``WorkflowHandle``: waiting (with a real stalled SQLite store), typed outputs, errors."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pydantic
import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    FrameworkError,
    SerializationError,
    WaitTimeoutError,
    WorkflowConfig,
    WorkflowFailedError,
    WorkflowHandle,
    WorkflowNotFinishedError,
    WorkflowNotFoundError,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.codec import TAG_KEY
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore

FAST = WorkflowConfig(retry_backoff_secs=0)


async def reap_abandoned_sqlite_closes() -> None:
    """Cancel the close tasks SQLAlchemy leaves behind for cancelled aiosqlite calls.

    When a call blocked in SQLite's busy timeout is cancelled, SQLAlchemy 2.1 terminates
    the aiosqlite connection twice (a shielded graceful close, then a forced stop); with
    aiosqlite 0.22 the forced stop ends the connection thread first, so the graceful
    close waits forever on a future nobody will resolve. Left alone, that task blocks
    the event loop's shutdown. It holds no lock and no connection.
    """
    await anyio.sleep(0.1)
    for task in asyncio.all_tasks():
        if task.get_coro().__qualname__.endswith("_terminate_graceful_close"):  # type: ignore[union-attr]
            task.cancel()
    await anyio.lowlevel.checkpoint()


def db_path(store: SQLiteStore) -> str:
    database = store.engine.url.database
    assert database and Path(database).is_file()
    return database


# -- workflows -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


class PointModel(pydantic.BaseModel):
    x: int
    y: int


class Invoice(pydantic.BaseModel):
    number: str
    lines: list[tuple[str, int]]


@workflow_step
async def handle_make_point(x: int, y: int) -> Point:
    return Point(x, y)


@workflow
async def point_flow(x: int, y: int) -> Point:
    return await handle_make_point(x, y)


@workflow
async def invoice_flow(number: str) -> Invoice:
    return Invoice(number=number, lines=[("widget", 2), ("gadget", 1)])


@workflow
async def dict_flow() -> dict[str, int]:
    return {"x": 3, "y": 4}


@workflow
async def list_flow() -> list[int]:
    return [1, 2, 3]


@workflow
async def answer_flow() -> int:
    return 42


@workflow(max_attempts=1)
async def failing_flow(reason: str) -> None:
    raise LookupError(reason)


@workflow
async def slow_flow(delay: float) -> str:
    await anyio.sleep(delay)
    return "slow done"


GATES: dict[str, tuple[anyio.Event, anyio.Event]] = {}


@workflow
async def gated_flow(key: str) -> str:
    """Says it has started, then runs until the test lets it end."""
    entered, release = GATES[key]
    entered.set()
    await release.wait()
    return "gated done"


# -- wait / wait_with_options ----------------------------------------------------------------


async def test_wait_returns_the_terminal_status(sqlite_store: SQLiteStore) -> None:
    client = DurableClient(sqlite_store)
    runner = WorkflowRunner(sqlite_store, FAST)
    ok = await client.start_workflow(answer_flow)
    bad = await client.start_workflow(failing_flow, "nope")
    results: dict[str, WorkflowStatus] = {}

    async def waiter(name: str, handle: WorkflowHandle[Any]) -> None:
        results[name] = await handle.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter, "ok", ok)
        tg.start_soon(waiter, "bad", bad)
        await anyio.sleep(0.15)
        assert results == {}  # still pending: wait() keeps polling
        await runner.run_once(ok)
        await runner.run_once(bad)
    assert results == {"ok": WorkflowStatus.SUCCEEDED, "bad": WorkflowStatus.FAILED}
    # A terminal workflow answers at once, even to a zero deadline.
    assert await ok.wait() is WorkflowStatus.SUCCEEDED
    assert await ok.wait_with_timeout(0) is WorkflowStatus.SUCCEEDED
    pending = await client.start_workflow(answer_flow)
    with pytest.raises(WaitTimeoutError, match="last seen pending"):
        await pending.wait_with_timeout(0)


async def test_wait_with_options_poll_and_deadline(sqlite_store: SQLiteStore) -> None:
    client = DurableClient(sqlite_store)
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await client.start_workflow(slow_flow, 0.2)

    async def run_later() -> None:
        await anyio.sleep(0.05)
        await runner.run_once(handle)

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_later)
        status = await handle.wait_with_options(poll=0.02, deadline=120)
    assert status is WorkflowStatus.SUCCEEDED, "a poll saw it end, long before the deadline"
    assert time.monotonic() - started >= 0.2, "not before the body's 0.2 s"
    assert await handle.output() == "slow done"

    # timedeltas work as well as seconds, and None means "no limit".
    assert await handle.wait_with_options(timedelta(milliseconds=10), timedelta(seconds=1)) == (
        WorkflowStatus.SUCCEEDED
    )
    assert await handle.wait_with_options(None, None) is WorkflowStatus.SUCCEEDED
    assert await handle.wait_with_timeout(timedelta(seconds=1)) is WorkflowStatus.SUCCEEDED

    with pytest.raises(ConfigurationError, match="poll"):
        await handle.wait_with_options(poll=-1)
    with pytest.raises(ConfigurationError, match="deadline"):
        await handle.wait_with_options(deadline=float("nan"))


async def test_wait_with_timeout_on_a_pending_workflow(sqlite_store: SQLiteStore) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(answer_flow)
    before = await handle.info()
    started = time.monotonic()
    with (
        anyio.fail_after(120),
        pytest.raises(WaitTimeoutError, match="last seen pending") as caught,
    ):
        await handle.wait_with_options(poll=0.02, deadline=0.2)
    assert time.monotonic() - started >= 0.2
    assert "Timed out" in str(caught.value) and handle.id in str(caught.value)
    assert await handle.info() == before


async def test_timeout_does_not_cancel_a_running_workflow(sqlite_store: SQLiteStore) -> None:
    entered, release = GATES["running"] = (anyio.Event(), anyio.Event())
    handle = await DurableClient(sqlite_store).start_workflow(gated_flow, "running")
    runner = WorkflowRunner(sqlite_store, FAST)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run_once, handle)
        with anyio.fail_after(120):
            await entered.wait()
        with pytest.raises(WaitTimeoutError, match="last seen running"):
            await handle.wait_with_options(poll=0.02, deadline=0.1)
        assert await handle.status() is WorkflowStatus.RUNNING
        release.set()
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "gated done"
    assert (await handle.info()).attempts == 1


async def test_wait_with_timeout_fires_on_time_against_a_stalled_store(
    sqlite_store: SQLiteStore,
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(answer_flow)
    before = await handle.info()
    path = db_path(sqlite_store)
    # Release the store's pooled connections (WAL readers hold a shared lock), so
    # the blocker below can take the file for itself.
    await sqlite_store.close()
    await sqlite_store.open()

    blocker = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        blocker.execute("PRAGMA locking_mode=EXCLUSIVE")
        blocker.execute("BEGIN EXCLUSIVE")

        # The stall is real: another connection cannot even read...
        probe = sqlite3.connect(path, timeout=0.05)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("SELECT status FROM workflows").fetchall()
        probe.close()
        # ... and the store's own status query sits in its busy timeout.
        with anyio.move_on_after(0.3) as probe_scope:
            await sqlite_store.get_workflow(handle.id)
        assert probe_scope.cancelled_caught, "the status query did not block"

        # The store stays stalled until the finally below (its busy timeout is 10 s): the
        # wait ends at its own deadline, with no status read ("never came back").
        started = time.monotonic()
        with anyio.fail_after(120), pytest.raises(WaitTimeoutError) as caught:
            await handle.wait_with_timeout(0.3)
        assert time.monotonic() - started >= 0.3
    finally:
        if blocker.in_transaction:
            blocker.rollback()
        blocker.close()

    await reap_abandoned_sqlite_closes()

    error = caught.value
    assert isinstance(error, TimeoutError) and isinstance(error, FrameworkError)
    assert "Timed out" in str(error) and "not cancelled" in str(error)
    assert "never came back" in str(error)
    # Not cancelled: the row is still there and unchanged; a worker can still run it.
    with anyio.fail_after(120):
        assert await handle.info() == before
        assert await WorkflowRunner(sqlite_store, FAST).run_once(handle) is (
            WorkflowStatus.SUCCEEDED
        )
    assert await handle.output() == 42


# -- outputs ---------------------------------------------------------------------------------


async def test_dataclass_output_round_trips(sqlite_store: SQLiteStore) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(point_flow, 1, 2)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED

    value = await handle.output()
    assert type(value) is Point and value == Point(1, 2)
    assert await handle.output(Point) == Point(1, 2)
    converted = await handle.output(PointModel)
    assert type(converted) is PointModel and converted == PointModel(x=1, y=2)

    raw = await handle.output_raw()
    assert isinstance(raw, str)
    document = json.loads(raw)
    assert document[TAG_KEY] == "dataclass"
    assert document["fields"] == {"x": 1, "y": 2}
    assert document["type"].endswith(":Point")


async def test_pydantic_output_round_trips(sqlite_store: SQLiteStore) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(invoice_flow, "INV-1")
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    expected = Invoice(number="INV-1", lines=[("widget", 2), ("gadget", 1)])
    value = await handle.output()
    assert type(value) is Invoice and value == expected
    assert type(value.lines[0]) is tuple
    assert await handle.output(Invoice) == expected
    assert json.loads(await handle.output_raw())[TAG_KEY] == "pydantic"


async def test_output_converts_to_the_requested_type(sqlite_store: SQLiteStore) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    client = DurableClient(sqlite_store)
    as_dict = await client.start_workflow(dict_flow)
    as_list = await client.start_workflow(list_flow)
    answer = await client.start_workflow(answer_flow)
    for handle in (as_dict, as_list, answer):
        assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED

    assert await as_dict.output() == {"x": 3, "y": 4}
    assert await as_dict.output(Point) == Point(3, 4)
    assert await as_dict.output(PointModel) == PointModel(x=3, y=4)
    assert await as_list.output(tuple[int, ...]) == (1, 2, 3)
    assert await as_list.output(list[float]) == [1.0, 2.0, 3.0]
    assert await answer.output(int) == 42
    assert await answer.output_raw() == "42"
    with pytest.raises(SerializationError, match="cannot convert"):
        await answer.output(Point)
    with pytest.raises(SerializationError):
        await as_list.output(dict)


async def test_output_of_failed_and_pending_workflows(sqlite_store: SQLiteStore) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    client = DurableClient(sqlite_store)
    failed = await client.start_workflow(failing_flow, "no such invoice")
    pending = await client.start_workflow(answer_flow)
    assert await runner.run_once(failed) is WorkflowStatus.FAILED

    for read in (failed.output, failed.output_raw):
        with pytest.raises(WorkflowFailedError, match="no such invoice") as caught:
            await read()
        assert caught.value.error["type"] == "builtins.LookupError"
        assert caught.value.error["message"] == "no such invoice"
        assert "LookupError" in caught.value.error["traceback"]
    assert await failed.error() == caught.value.error

    for read_pending in (pending.output, pending.output_raw):
        with pytest.raises(WorkflowNotFinishedError, match="pending"):
            await read_pending()
    assert await pending.error() is None

    await sqlite_store.cancel_workflow(pending.id)
    assert await pending.wait_with_timeout(1) is WorkflowStatus.CANCELLED
    with pytest.raises(WorkflowFailedError, match="cancelled"):
        await pending.output()


async def test_handle_to_unknown_workflow(sqlite_store: SQLiteStore) -> None:
    handle = DurableClient(sqlite_store).handle("00000000-0000-0000-0000-000000000000")
    with pytest.raises(WorkflowNotFoundError) as caught:
        await handle.status()
    assert isinstance(caught.value, LookupError)
    with pytest.raises(WorkflowNotFoundError):
        await handle.output()
    with pytest.raises(WorkflowNotFoundError):
        await handle.wait_with_timeout(1)
