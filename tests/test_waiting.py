"""Workflows that wait, run in-process on SQLite and PostgreSQL with the runner's clock.

The store operations are covered by the contract suite; these tests hold the
engine's side: journaling across replays and retries, misuse, and idempotent start.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import anyio
import pytest

import durable_core
from durable_core import (
    ConfigurationError,
    DurableClient,
    FrameworkError,
    StepNameMismatchError,
    WaitTimeoutError,
    WorkflowConflictError,
    WorkflowStart,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.runtime.config import WorkflowConfig
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

RAN: Counter[str] = Counter()
FAIL_ONCE: set[str] = set()
SHAPE: dict[str, str] = {}


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    return sqlite_or_postgres


@pytest.fixture(autouse=True)
def fresh_counts() -> None:
    RAN.clear()
    FAIL_ONCE.clear()


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0, max_attempts=3))


@workflow_step
async def count(key: str) -> str:
    RAN[key] += 1
    if key in FAIL_ONCE:
        FAIL_ONCE.discard(key)
        raise RuntimeError(f"planned failure of {key}")
    return key


@workflow(max_attempts=1)
async def sleeps_many_times(key: str, times: int) -> int:
    for _ in range(times):
        await durable_core.sleep(timedelta(hours=1))
    await count(key)
    return times


async def test_sleeping_a_hundred_times_costs_no_attempt(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(sleeps_many_times, "many", 100)
    run = runner(store)
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert (await handle.info()).attempts == 1 and await handle.output() == 100
    assert run.clock.offset >= timedelta(hours=99.9), "the runner's clock skipped 100 hours"


@workflow
async def sends_then_fails(key: str, to: str) -> str:
    await durable_core.send(to, f"from {key}", topic="t")
    child = await durable_core.start_workflow(receives, f"{key}-child")
    await count(key)  # fails on the first attempt: the send and the start replay
    await durable_core.send(child.id, "go", topic="t")
    return str(await child.output())


@workflow
async def receives(key: str) -> str:
    message = await durable_core.recv("t")
    await count(key)
    return str(message)


async def test_sends_and_starts_in_a_body_happen_once_across_retries(store: Store) -> None:
    client = DurableClient(store)
    inbox = await client.start_workflow(receives, "inbox")
    FAIL_ONCE.add("sender")
    handle = await client.start_workflow(sends_then_fails, "sender", inbox.id)
    run = runner(store)
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert (await handle.info()).attempts == 2, "the step failed once"
    assert await handle.output() == "go"
    children = [r for r in await store.list_workflows(limit=100) if r.parent_id == handle.id]
    assert len(children) == 1, "the child was started once"
    assert await run.run_until_complete(inbox) is WorkflowStatus.SUCCEEDED
    assert await inbox.output() == "from sender"
    assert RAN["inbox"] == 1


@workflow
async def outside_waits() -> None:
    await count("outside")


@workflow_step
async def recv_in_a_step() -> object:
    return await durable_core.recv("t")


@workflow(max_attempts=1)
async def misuses_recv() -> object:
    return await recv_in_a_step()


async def test_recv_and_set_event_work_only_in_a_body(store: Store) -> None:
    with pytest.raises(FrameworkError, match="only in a workflow body"):
        await durable_core.recv("t")
    with pytest.raises(FrameworkError, match="only in a workflow body"):
        await durable_core.set_event("k", 1)
    handle = await DurableClient(store).start_workflow(misuses_recv)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert (
        error is not None
        and "recv() works in a workflow body, not inside a step" in (error["message"])
    )


async def test_sleep_outside_a_workflow_is_a_plain_sleep_and_checks_its_input() -> None:
    started = time.monotonic()
    await durable_core.sleep(0.05)
    await durable_core.sleep_until(datetime.now(UTC) + timedelta(seconds=0.05))
    assert time.monotonic() - started >= 0.09
    with pytest.raises(ConfigurationError, match="non-negative"):
        await durable_core.sleep(-1)
    with pytest.raises(ConfigurationError, match="timezone-aware"):
        await durable_core.sleep_until(datetime(2030, 1, 1))


@workflow(max_attempts=1)
async def reshaped(key: str) -> None:
    if SHAPE[key] == "sleep":
        await durable_core.sleep(60)
    else:
        await durable_core.recv("t", timeout=60)


async def test_a_body_that_waits_differently_on_replay_fails_as_nondeterministic(
    store: Store,
) -> None:
    SHAPE["r"] = "sleep"
    handle = await DurableClient(store).start_workflow(reshaped, "r")
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    SHAPE["r"] = "recv"
    run.clock.advance(120)
    assert await run.run_until_complete(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"].endswith(StepNameMismatchError.__name__)
    assert "durable.recv at index 0" in error["message"]


@workflow
async def parent_with_deadline(key: str) -> str:
    child = await durable_core.start_workflow(receives, f"{key}-child")
    try:
        await child.wait_with_timeout(30)
    except WaitTimeoutError:
        return "gave up"
    return "done"


async def test_a_parents_wait_on_a_child_can_time_out(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(parent_with_deadline, "p")
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "gave up"
    [child] = [r for r in await store.list_workflows(limit=100) if r.parent_id == handle.id]
    assert child.status is WorkflowStatus.WAITING, "the child still waits for its message"


async def test_get_event_returns_none_after_its_timeout(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(outside_waits)
    started = time.monotonic()
    with anyio.fail_after(120):
        assert await handle.get_event("never", timeout=0.2) is None
    assert time.monotonic() - started >= 0.2


@workflow
async def order(order_id: str, amount: int) -> int:
    await count(order_id)
    return amount


async def test_start_with_an_id_is_at_most_once_and_conflicts_are_refused(store: Store) -> None:
    client = DurableClient(store)
    first = await client.start_workflow_with_id("order-42", order, "order-42", 5)
    again = await client.start_workflow_with_id("order-42", order, "order-42", 5)
    assert again.id == first.id == "order-42"
    assert await runner(store).run_until_complete(first) is WorkflowStatus.SUCCEEDED
    done = await client.start_workflow_with_id("order-42", order, "order-42", 5)
    assert await done.status() is WorkflowStatus.SUCCEEDED, "a finished one is not restarted"
    assert RAN["order-42"] == 1
    with pytest.raises(WorkflowConflictError, match="cannot start it again"):
        await client.start_workflow_with_id("order-42", order, "order-42", 6)
    with pytest.raises(ConfigurationError, match="1 to 255 characters"):
        await client.start_workflow_with_id("x" * 256, order, "x", 1)
    handles = await client.start_workflows(
        order,
        [WorkflowStart(args=("order-42", 5), workflow_id="order-42"), ("order-43", 1)],
    )
    assert handles[0].id == "order-42" and handles[1].id != "order-43"
    assert len(await store.list_workflows(name=order.name, limit=10)) == 2


async def test_concurrent_starts_with_one_id_leave_one_row(store: Store) -> None:
    client = DurableClient(store)
    results: list[str] = []

    async def start() -> None:
        handle = await client.start_workflow_with_id("same-id", order, "same-id", 1)
        results.append(handle.id)

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(start)
    assert results == ["same-id"] * 20
    assert len(await store.list_workflows(name=order.name, limit=50)) == 1


@workflow(max_attempts=1)
async def waits_on_a_stranger(other: str) -> str:
    return str(await durable_core.get_handle(other).output())


@workflow
async def publishes_and_waits() -> None:
    await durable_core.set_event("ready", True)
    await durable_core.recv("never")


async def test_a_body_cannot_wait_on_a_workflow_it_did_not_start(store: Store) -> None:
    client = DurableClient(store)
    stranger = await client.start_workflow(publishes_and_waits)
    handle = await client.start_workflow(waits_on_a_stranger, stranger.id)
    assert await runner(store).run_once(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and "which is not its child" in error["message"]
    assert await runner(store).run_once(stranger) is WorkflowStatus.WAITING
    assert await stranger.get_event("ready", timeout=0) is True, "timeout 0 looks once"


async def test_an_idempotency_key_counts_per_receiving_workflow(store: Store) -> None:
    client = DurableClient(store)
    first = await client.start_workflow(receives, "k1")
    second = await client.start_workflow(receives, "k2")
    for target in (first, second, first):
        await client.send(target.id, target.id, topic="t", idempotency_key="same-key")
    run = runner(store)
    assert [await run.run_until_complete(h) for h in (first, second)] == [
        WorkflowStatus.SUCCEEDED
    ] * 2
    assert [await h.output() for h in (first, second)] == [first.id, second.id]
    with pytest.raises(ConfigurationError, match="at most 64 characters"):
        await client.send(first.id, 1, idempotency_key="k" * 65)


@workflow
async def cleans_up_around_a_wait(key: str) -> str:
    try:
        return str(await durable_core.recv("t"))
    finally:
        await count(key)


async def test_a_finally_around_a_wait_runs_and_the_workflow_still_waits(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(cleans_up_around_a_wait, "cleanup")
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    assert (await handle.info()).waiting_for == "message:t"
    await DurableClient(store).send(handle.id, "hi", topic="t")
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "hi"
