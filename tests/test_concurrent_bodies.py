"""Concurrency inside one workflow body: steps, sleeps, messages and children run side by
side (``asyncio.gather``, anyio task groups), replay to each branch's own results, and a
body whose every branch waits suspends as one workflow.

In-process, on SQLite and PostgreSQL, with the runner's clock. The worker's side (a real
process, crashes) is in ``tests/worker/test_concurrent_processes.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import datetime, timedelta

import anyio
import pytest

import durable_core
from durable_core import (
    DurableClient,
    StepNameMismatchError,
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
GATES: dict[str, anyio.Event] = {}
"""A gated step ends only once its gate is set."""
ENDED: dict[str, anyio.Event] = {}
"""Set when the step of that key has run."""


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    return sqlite_or_postgres


@pytest.fixture(autouse=True)
def fresh() -> None:
    RAN.clear()
    FAIL_ONCE.clear()
    GATES.clear()
    ENDED.clear()


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0, max_attempts=3))


def _ran(key: str) -> str:
    RAN[key] += 1
    if key in ENDED:
        ENDED[key].set()
    if key in FAIL_ONCE:
        FAIL_ONCE.discard(key)
        raise RuntimeError(f"planned failure of {key}")
    return key


@workflow_step
async def count(key: str) -> str:
    return _ran(key)


@workflow_step
async def after(gate: str, key: str) -> str:
    """Ends only once ``gate`` opens (when the test opened one): sets the order steps of
    different branches end in."""
    if gate in GATES:
        await GATES[gate].wait()
    return _ran(key)


async def _branch(name: str, steps: int) -> list[str]:
    return [await after(f"{name}{n}", f"{name}{n}") for n in range(steps)]


@workflow
async def two_branches() -> list[list[str]]:
    first = await count("before")
    both = await asyncio.gather(_branch("a", 3), _branch("b", 2))
    return [[first], *both, [await count("after")]]


async def test_branches_replay_to_their_own_results_whatever_order_they_ended_in(
    store: Store,
) -> None:
    """The first attempt ends b's steps before a's (a waits on gates the test opens late),
    then fails in the step after the gather; the retry replays every branch from the
    cache, ending in another order, and runs only the failed step again."""
    for gate in ("a0", "a1", "a2"):
        GATES[gate] = anyio.Event()
    FAIL_ONCE.add("after")
    ENDED["b1"] = anyio.Event()
    handle = await DurableClient(store).start_workflow(two_branches)

    async def open_a_late() -> None:
        await ENDED["b1"].wait()
        for gate in ("a0", "a1", "a2"):
            GATES[gate].set()
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(open_a_late)
        assert await runner(store).run_once(handle) is WorkflowStatus.PENDING
    GATES.clear()  # the replay ends the branches in call order
    assert await runner(store).run_once(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == [["before"], ["a0", "a1", "a2"], ["b0", "b1"], ["after"]]
    assert Counter({"before": 1, "a0": 1, "a1": 1, "a2": 1, "b0": 1, "b1": 1, "after": 2}) == RAN
    steps = await handle.steps()
    # Indexes follow the order calls were made; paths name each branch (the order the body
    # started it) and the call's number in it, and the body's own calls are numbered apart.
    assert [s.step_index for s in steps] == list(range(7))
    assert {(s.path or str(s.step_index)): s.output for s in steps} == {
        "0": '"before"',
        "0:0": '"a0"',
        "1:0": '"b0"',
        "1:1": '"b1"',
        "0:1": '"a1"',
        "0:2": '"a2"',
        "1": '"after"',
    }


@workflow
async def fan_out(n: int) -> list[int]:
    handles = [await durable_core.start_workflow(square, i) for i in range(n)]
    return list(await asyncio.gather(*(h.output() for h in handles)))


@workflow
async def square(i: int) -> int:
    await durable_core.sleep(timedelta(minutes=i % 3))
    return i * i


async def test_fan_out_fan_in_over_a_hundred_children(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(fan_out, 100)
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    record = await handle.info()
    assert record.waiting_for == "any:100", "one suspension waits on every child"
    assert await run.run_until_complete(handle, max_runs=10_000) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == [i * i for i in range(100)]
    children = await DurableClient(store).list_workflows(parent_id=handle.id, limit=200)
    assert len(children) == 100 and {c.status for c in children} == {WorkflowStatus.SUCCEEDED}


@workflow
async def naps_side_by_side() -> list[str]:
    async def nap(minutes: int) -> str:
        await durable_core.sleep(timedelta(minutes=minutes))
        return await count(f"woke after {minutes}")

    return list(await asyncio.gather(nap(30), nap(10), nap(20)))


async def test_a_gather_of_sleeps_suspends_once_and_wakes_each_branch_in_turn(
    store: Store,
) -> None:
    handle = await DurableClient(store).start_workflow(naps_side_by_side)
    run = runner(store)
    started = run.clock.now()
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    record = await handle.info()
    assert record.waiting_for == "any:3"
    assert record.wake_at is not None
    assert timedelta(minutes=9) < record.wake_at - started <= timedelta(minutes=10, seconds=5)
    assert len([s for s in await handle.steps() if s.status.value == "waiting"]) == 3
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == ["woke after 30", "woke after 10", "woke after 20"]
    assert Counter({"woke after 30": 1, "woke after 10": 1, "woke after 20": 1}) == RAN
    assert (await handle.info()).attempts == 1, "waking costs no attempt"


@workflow
async def two_inboxes() -> list[object]:
    return list(await asyncio.gather(durable_core.recv("left"), durable_core.recv("right")))


async def test_a_message_on_either_topic_wakes_a_body_waiting_on_both(store: Store) -> None:
    client = DurableClient(store)
    handle = await client.start_workflow(two_inboxes)
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    await client.send(handle.id, "R", topic="right")
    record = await handle.info()
    assert record.status is WorkflowStatus.PENDING, "the message woke it"
    assert await run.run_once(handle) is WorkflowStatus.WAITING, "left still waits"
    waiting = [s for s in await handle.steps() if s.status.value == "waiting"]
    assert [json.loads(s.input) for s in waiting] == [["left"]]
    await client.send(handle.id, "L", topic="left")
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == ["L", "R"]


@workflow
async def steps_beside_a_wait() -> list[str]:
    results: list[str] = []

    async def waiter() -> None:
        results.append(str(await durable_core.recv("go")))

    async def worker() -> None:
        for n in range(3):
            results.append(await count(f"work{n}"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        tg.start_soon(worker)
    return results


async def test_a_task_group_suspends_once_its_steps_are_done_and_the_rest_waits(
    store: Store,
) -> None:
    """A wait inside an anyio task group suspends the workflow without an exception group
    escaping (it used to end the worker)."""
    client = DurableClient(store)
    handle = await client.start_workflow(steps_beside_a_wait)
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    assert Counter({"work0": 1, "work1": 1, "work2": 1}) == RAN, "the steps ran first"
    assert (await handle.info()).waiting_for == "message:go"
    await client.send(handle.id, "going", topic="go")
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == ["work0", "work1", "work2", "going"]
    assert Counter({"work0": 1, "work1": 1, "work2": 1}) == RAN, "replayed, not run again"


@workflow
async def wait_beside_a_slow_step() -> list[str]:
    async def nap() -> str:
        await durable_core.sleep(timedelta(seconds=0.2))
        return await count("after nap")

    async def slow() -> str:
        return await after("slow", "slow")

    return list(await asyncio.gather(nap(), slow()))


async def test_a_sleep_ending_while_another_branch_runs_goes_on_in_the_same_attempt(
    store: Store,
) -> None:
    GATES["slow"] = anyio.Event()
    ENDED["after nap"] = anyio.Event()
    handle = await DurableClient(store).start_workflow(wait_beside_a_slow_step)

    async def open_once_napped() -> None:
        await ENDED["after nap"].wait()
        GATES["slow"].set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(open_once_napped)
        assert await runner(store).run_once(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == ["after nap", "slow"]
    assert not [s for s in await handle.steps() if s.status.value == "waiting"]


@workflow
async def changes_its_mind() -> list[object]:
    return list(await asyncio.gather(count("one"), _branch("c", 1), count("two")))


async def test_a_determinism_error_in_a_concurrent_body_names_the_index_and_both_steps(
    store: Store,
) -> None:
    handle = await DurableClient(store).start_workflow(changes_its_mind)
    assert await runner(store).run_once(handle) is WorkflowStatus.SUCCEEDED
    # The branch started second (path 1:) ran `after`; a body calling `count` there breaks
    # the contract.
    client = DurableClient(store)
    forked = await client.fork(handle.id, from_step=3)
    changes_its_mind.fn = _changed_mind
    try:
        assert await runner(store).run_once(forked) is WorkflowStatus.FAILED
    finally:
        changes_its_mind.fn = _original_mind
    error = await forked.error()
    assert error is not None and error["type"].endswith("StepNameMismatchError")
    assert StepNameMismatchError.__name__ in error["type"]
    assert "at index 1" in error["message"] and "branch path 1:0" in error["message"]
    assert "'tests.test_concurrent_bodies.count'" in error["message"]
    assert "'tests.test_concurrent_bodies.after'" in error["message"]


_original_mind = changes_its_mind.fn


async def _changed_mind() -> list[object]:
    async def other() -> list[str]:
        return [await count("c0")]

    return list(await asyncio.gather(count("one"), other(), count("two")))


@workflow
async def stamped() -> list[object]:
    first = await durable_core.now()
    roll = await durable_core.random()
    await durable_core.sleep(timedelta(hours=5))
    return [first.isoformat(), roll, (await durable_core.now()).isoformat()]


async def test_now_and_random_are_recorded_and_follow_the_runners_clock(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(stamped)
    run = runner(store)
    began = run.clock.now()
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    ran_until = run.clock.now()
    first = [s for s in await handle.steps() if s.step_name in ("durable.now", "durable.random")]
    assert [s.step_name for s in first] == ["durable.now", "durable.random"]
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    start, roll, end = await handle.output()
    assert isinstance(start, str) and isinstance(roll, float) and isinstance(end, str)
    assert json.loads(first[0].output or "") == start, "the replay returned the recorded time"
    assert json.loads(first[1].output or "") == roll and 0 <= roll < 1
    assert datetime.fromisoformat(end) - datetime.fromisoformat(start) >= timedelta(hours=5)
    assert began <= datetime.fromisoformat(start) <= ran_until, "the runner's clock"
    assert isinstance(await durable_core.now(), datetime) and 0 <= await durable_core.random() < 1
