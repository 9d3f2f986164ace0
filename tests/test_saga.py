"""Sagas (issue 22, "Compensation"): ``async with saga() as s`` undoes a failed block.

In-process through the real executor (``WorkflowRunner``) on SQLite and PostgreSQL:
the compensations run in the reverse order, each once it has succeeded and at least
once, the workflow's error names them; a cancel of a workflow owing compensations lets
them run first; a timeout runs them past the deadline; a replay does not run them again.
The SIGKILL in the middle of compensating is tests/worker/test_saga_processes.py.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from durable_core import (
    CompensatedError,
    DurableClient,
    SagaUsageError,
    SerializationError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowStatus,
    WorkflowTimeoutError,
    saga,
    sleep,
    workflow,
    workflow_step,
)
from durable_core.codec.failures import load_error
from durable_core.runtime.config import WorkflowConfig
from durable_core.runtime.context import WorkflowContext
from durable_core.seams.store import Store
from durable_core.testing import TestClock, WorkflowRunner
from tests.test_cli import durable

pytestmark = pytest.mark.anyio

LOG: list[str] = []
"""What the steps did, in order (reset for each test)."""
FLAKY: Counter[str] = Counter()
"""How many more times each flaky compensation fails."""


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    LOG.clear()
    FLAKY.clear()


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    """SQLite: the SQL rules are the same on every store (the contract suite runs them on
    each, the worker test on PostgreSQL)."""
    return sqlite_store


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0))


@workflow_step
async def book(what: str) -> str:
    LOG.append(f"book {what}")
    return f"{what}-ref"


@workflow_step
async def undo(ref: str) -> None:
    if FLAKY[ref] > 0:
        FLAKY[ref] -= 1
        LOG.append(f"undo {ref} failed")
        raise ConnectionError(f"cannot reach the service to undo {ref}")
    LOG.append(f"undo {ref}")


@workflow_step
async def charge(amount: int) -> int:
    LOG.append(f"charge {amount}")
    if amount > 100:
        raise ValueError(f"card declined for {amount}")
    return amount


@workflow(name="saga.trip", max_attempts=3)
async def trip(amount: int) -> str:
    async with saga() as s:
        for what in ("car", "hotel", "flight"):
            ref = await book(what)
            await s.compensate(undo, ref)
        await charge(amount)
    return "booked"


async def _error(store: Store, workflow_id: str) -> dict[str, Any]:
    record = await DurableClient(store).handle(workflow_id).info()
    error = load_error(record.error)
    assert error is not None
    return error


async def test_a_failed_block_compensates_in_reverse_order_and_says_which_ran(
    store: Store,
) -> None:
    handle = await DurableClient(store).start_workflow(trip, 500)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    assert LOG == [
        "book car",
        "book hotel",
        "book flight",
        "charge 500",
        "undo flight-ref",
        "undo hotel-ref",
        "undo car-ref",
    ]
    error = await _error(store, handle.id)
    assert error["type"] == "durable_core.primitives.saga.CompensatedError"
    undo_name = undo.name
    assert error["details"]["compensations"] == [undo_name] * 3
    assert error["details"]["original"]["type"] == "builtins.ValueError"
    assert "card declined for 500" in error["message"]
    assert f"compensations ran, last registered first: {undo_name}" in error["message"]
    # Compensated is final: no second attempt books again.
    assert [a.outcome for a in await handle.attempts()] == ["failed"]
    with pytest.raises(WorkflowFailedError) as raised:
        await handle.output()
    assert isinstance(raised.value, CompensatedError)


async def test_a_block_that_succeeds_runs_no_compensation(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(trip, 50)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert [line for line in LOG if line.startswith("undo")] == []
    steps = await handle.steps()
    assert [s.step_name for s in steps].count("durable.saga_end") == 1


async def test_a_failing_compensation_is_run_again_by_the_next_attempt_and_no_other_is(
    store: Store,
) -> None:
    FLAKY["hotel-ref"] = 1  # fails once, then works
    handle = await DurableClient(store).start_workflow(trip, 500)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    assert LOG[4:] == [
        "undo flight-ref",
        "undo hotel-ref failed",
        # the next attempt: flight's undo is recorded, hotel's runs again, then car's
        "undo hotel-ref",
        "undo car-ref",
    ]
    assert LOG.count("charge 500") == 1, "the failed block is not run again"
    assert [a.outcome for a in await handle.attempts()] == ["retry", "failed"]
    error = await _error(store, handle.id)
    assert error["details"]["compensations"] == [undo.name] * 3


async def test_compensations_left_when_the_attempts_run_out_are_named(store: Store) -> None:
    FLAKY["hotel-ref"] = 10
    handle = await DurableClient(store).start_workflow(trip, 500)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = await _error(store, handle.id)
    assert error["details"]["compensations"] == [undo.name]
    assert error["details"]["failed"] == undo.name
    assert "cannot reach the service to undo hotel-ref" in error["message"]
    assert "car-ref" not in " ".join(LOG[4:])


@workflow(name="saga.waits", max_attempts=3)
async def waits_in_saga(days: int) -> str:
    async with saga() as s:
        ref = await book("car")
        await s.compensate(undo, ref)
        await sleep(timedelta(days=days))
        await book("never")
    return "done"


async def test_a_block_that_suspends_and_resumes_compensates_nothing(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(waits_in_saga, 3)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert LOG == ["book car", "book never"]
    handle = await DurableClient(store).start_workflow(nothing_owed)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert "durable.saga_end" not in [s.step_name for s in await handle.steps()]


async def test_a_cancel_of_a_workflow_owing_compensations_runs_them_first(
    sqlite_or_postgres: Store,
) -> None:
    store = sqlite_or_postgres
    client = DurableClient(store)
    handle = await client.start_workflow(waits_in_saga, 3)
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    await handle.cancel()
    # A request: the workflow runs once more, to compensate.
    assert await handle.status() is WorkflowStatus.PENDING
    assert await run.run_until_complete(handle) is WorkflowStatus.CANCELLED
    assert LOG == ["book car", "undo car-ref"]
    with pytest.raises(WorkflowCancelledError) as raised:
        await handle.output()
    assert f"compensations ran: {undo.name}" in str(raised.value)
    assert raised.value.error["details"]["compensations"] == [undo.name]


async def test_durable_cancel_says_the_cancel_is_a_request(
    sqlite_store: Store, tmp_path: Path
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(waits_in_saga, 3)
    assert await runner(sqlite_store).run_once(handle) is WorkflowStatus.WAITING
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    requested = durable("cancel", handle.id, "--database-url", url)
    assert requested.returncode == 0, requested.stderr
    assert requested.stdout == (
        f"workflow {handle.id}: cancel requested; it runs its compensations first\n"
    )
    assert await runner(sqlite_store).run_until_complete(handle) is WorkflowStatus.CANCELLED
    assert LOG == ["book car", "undo car-ref"]


EVENTS: dict[str, anyio.Event] = {}
"""Events a test and its steps share (made in the test's event loop)."""


@workflow_step
async def wait_for_cancel() -> None:
    LOG.append("waiting")
    EVENTS["running"].set()
    await anyio.sleep(3600)


@workflow(name="saga.runs_when_cancelled")
async def runs_when_cancelled() -> str:
    async with saga() as s:
        ref = await book("car")
        await s.compensate(undo, ref)
        await wait_for_cancel()
    return "done"


async def test_a_running_body_hears_a_cancel_request_at_its_lease_renewal(
    sqlite_store: Store,
) -> None:
    """SQLite announces no cancel: while a saga is open, each renewal asks for one."""
    EVENTS["running"] = running = anyio.Event()
    handle = await DurableClient(sqlite_store).start_workflow(runs_when_cancelled)
    run = WorkflowRunner(sqlite_store, WorkflowConfig(lock_timeout_secs=1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(run.run_once, handle)
        await running.wait()
        await handle.cancel()
        assert await handle.status() is WorkflowStatus.RUNNING, "a request"
    assert await handle.status() is WorkflowStatus.CANCELLED
    assert LOG == ["book car", "waiting", "undo car-ref"]
    assert [a.outcome for a in await handle.attempts()] == ["cancelled"]


@workflow(name="saga.nothing_owed")
async def nothing_owed() -> str:
    async with saga():
        await sleep(timedelta(days=1))
    return "done"


async def test_a_cancel_of_a_workflow_owing_nothing_ends_it_at_once(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(nothing_owed)
    assert await runner(store).run_once(handle) is WorkflowStatus.WAITING
    await handle.cancel()
    assert await handle.status() is WorkflowStatus.CANCELLED


async def test_a_timeout_runs_the_compensations_past_the_deadline(store: Store) -> None:
    client = DurableClient(store).with_options(timeout=timedelta(hours=1))
    handle = await client.start_workflow(waits_in_saga, 3)
    # The runner skips time to the deadline: the next attempt is past it, and compensates.
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.CANCELLED
    assert LOG == ["book car", "undo car-ref"]
    with pytest.raises(WorkflowTimeoutError) as raised:
        await handle.output()
    assert raised.value.error["details"]["compensations"] == [undo.name]


async def test_a_compensation_failing_past_the_deadline_is_run_again_then_it_times_out(
    store: Store,
) -> None:
    FLAKY["car-ref"] = 1
    client = DurableClient(store).with_options(timeout=timedelta(hours=1))
    handle = await client.start_workflow(waits_in_saga, 3)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.CANCELLED
    assert LOG == ["book car", "undo car-ref failed", "undo car-ref"]
    with pytest.raises(WorkflowTimeoutError) as raised:
        await handle.output()
    assert raised.value.error["details"]["compensations"] == [undo.name]


CLOCK = TestClock()
"""The clock of the runner of the test below, which moves it."""


@workflow_step
async def stall() -> None:
    """Passes the workflow's deadline, as the clock owns it, then waits for the executor's
    stop (the body's scope reaches its deadline, as when the timeout passes)."""
    LOG.append("stall")
    CLOCK.advance(timedelta(hours=2))
    ctx = WorkflowContext.current()
    assert ctx is not None
    ctx.run.body_scope.deadline = anyio.current_time()
    await anyio.sleep(3600)


@workflow(name="saga.stalls")
async def stalls() -> str:
    async with saga() as s:
        ref = await book("car")
        await s.compensate(undo, ref)
        await stall()
    return "done"


async def test_a_body_stopped_by_its_timeout_compensates_outside_the_deadline(
    sqlite_store: Store,
) -> None:
    client = DurableClient(sqlite_store).with_options(timeout=timedelta(hours=1))
    handle = await client.start_workflow(stalls)
    run = WorkflowRunner(sqlite_store, WorkflowConfig(retry_backoff_secs=0), clock=CLOCK)
    assert await run.run_once(handle) is WorkflowStatus.CANCELLED
    assert LOG == ["book car", "stall", "undo car-ref"]
    with pytest.raises(WorkflowTimeoutError) as raised:
        await handle.output()
    assert raised.value.error["details"]["compensations"] == [undo.name]


@workflow(name="saga.carries_on")
async def carries_on() -> str:
    """Catches the saga's error, then sleeps: its replay goes through the saga again."""
    try:
        async with saga() as s:
            ref = await book("car")
            await s.compensate(undo, ref)
            await charge(500)
    except CompensatedError as exc:
        outcome = f"compensated {len(exc.compensations)}"
    await sleep(timedelta(days=1))
    return outcome


async def test_a_replay_through_a_compensated_saga_runs_nothing_again(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(carries_on)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "compensated 1"
    assert LOG == ["book car", "charge 500", "undo car-ref"]
    names = [s.step_name for s in await handle.steps()]
    assert names.count(undo.name) == 1
    assert names.count("durable.saga_undo") == 1


async def test_compensations_are_recorded_under_the_saga_path(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(trip, 500)
    await runner(store).run_until_complete(handle)
    steps = {s.path or str(s.step_index): s for s in await handle.steps()}
    assert steps["0"].step_name == "durable.saga"
    assert steps["0/undo"].step_name == "durable.saga_undo"
    assert [json.loads(steps[f"0/{n}"].input)["args"] for n in range(3)] == [
        ["flight-ref"],
        ["hotel-ref"],
        ["car-ref"],
    ]
    assert json.loads(steps["0/end"].output or "") == [undo.name] * 3


# -- bad input --------------------------------------------------------------------------------


async def not_a_step(ref: str) -> None:
    LOG.append(f"plain {ref}")


@workflow(name="saga.misused", max_attempts=3)
async def misused() -> str:
    async with saga() as s:
        await s.compensate(not_a_step, "x")  # type: ignore[arg-type]
    return "done"


async def test_a_compensation_that_is_not_a_step_fails_the_workflow_at_once(
    store: Store,
) -> None:
    handle = await DurableClient(store).start_workflow(misused)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = await _error(store, handle.id)
    assert error["type"] == "durable_core.primitives.saga.SagaUsageError"
    assert "compensate() takes a @workflow_step" in error["message"]
    assert len(await handle.attempts()) == 1


async def test_misuse_outside_a_workflow_says_what_is_wrong() -> None:
    s = saga()
    with pytest.raises(SagaUsageError, match="outside its saga's block"):
        await s.compensate(undo, "x")
    async with s:
        with pytest.raises(SagaUsageError, match="takes a @workflow_step"):
            await s.compensate(print, "x")  # type: ignore[arg-type]
    with pytest.raises(SagaUsageError, match="outside its saga's block"):
        await s.compensate(undo, "x")
    with pytest.raises(SagaUsageError, match="entered once"):
        async with s:
            pass


@workflow(name="saga.unencodable")
async def unencodable() -> str:
    async with saga() as s:
        await s.compensate(undo, object())
    return "done"


async def test_a_compensation_whose_input_cannot_be_stored_fails_naming_it(
    sqlite_store: Store,
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(unencodable)
    assert await runner(sqlite_store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = await _error(sqlite_store, handle.id)
    assert error["type"] == f"{SerializationError.__module__}.{SerializationError.__qualname__}"
    assert f"input of compensation {undo.name!r}" in error["message"]


@workflow_step
async def opens_a_saga() -> None:
    async with saga():
        pass


@workflow(name="saga.in_a_step")
async def saga_in_a_step() -> str:
    await opens_a_saga()
    return "done"


async def test_a_saga_in_a_step_is_refused(sqlite_store: Store) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(saga_in_a_step)
    run = WorkflowRunner(sqlite_store, WorkflowConfig(retry_backoff_secs=0, max_attempts=1))
    assert await run.run_until_complete(handle) is WorkflowStatus.FAILED
    error = await _error(sqlite_store, handle.id)
    assert "saga() works in a workflow body, not inside a step" in error["message"]


async def test_outside_a_workflow_a_saga_compensates_in_memory() -> None:
    with pytest.raises(CompensatedError) as raised:
        async with saga() as s:
            await s.compensate(undo, "a")
            await s.compensate(undo, "b")
            raise KeyError("boom")
    assert LOG == ["undo b", "undo a"]
    assert raised.value.compensations == (undo.name, undo.name)
    assert raised.value.original["type"] == "builtins.KeyError"
    assert isinstance(raised.value.__cause__, KeyError)
