"""Concurrency inside a body is exact on replay: each branch is named when its task is
created, so replays (after a durable sleep, a failure, a crash) find every branch's own
records however the event loop orders them. Each test here is a pattern that ran
finished steps again, repeated an effect or failed for good before branches were named
at spawn (issue 34, defects 1-3 and 9). In-process on SQLite and PostgreSQL; the same
under real worker processes and SIGKILL is in tests/worker/test_concurrent_processes.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import anyio
import pytest

import durable_core
from durable_core import (
    DurableClient,
    HistoryDivergedError,
    NonRetryableError,
    RetryPolicy,
    WorkflowFailedError,
    WorkflowStatus,
    saga,
    workflow,
    workflow_step,
)
from durable_core.runtime.config import WorkflowConfig
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

RAN: Counter[str] = Counter()


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    return sqlite_or_postgres


@pytest.fixture(autouse=True)
def fresh() -> None:
    RAN.clear()


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0, max_attempts=3))


def _ran_once_each() -> None:
    assert RAN and max(RAN.values()) == 1, f"steps ran again: {RAN}"


@workflow_step
async def prepare(i: int) -> int:
    RAN[f"prepare {i}"] += 1
    await anyio.sleep(0.001 * ((i * 7) % 5))  # branches end in an order of their own
    return i * 10


@workflow_step
async def process(x: int) -> int:
    RAN[f"process {x}"] += 1
    await anyio.sleep(0.001 * ((x * 3) % 7))
    return x + 1


@workflow
async def spawns_in_a_loop(n: int) -> list[int]:
    done: list[int] = []

    async def handle(x: int) -> None:
        done.append(await process(x))

    async with anyio.create_task_group() as group:
        for i in range(n):
            group.start_soon(handle, await prepare(i))
    await durable_core.sleep(timedelta(seconds=1))
    return sorted(done)


async def test_branches_spawned_in_a_loop_between_steps_replay_without_running_again(
    store: Store,
) -> None:
    """Defect 1: `x = await prepare(i); tg.start_soon(process, x)` then a sleep: the replay
    after the sleep ran 4 of 10 steps again."""
    handle = await DurableClient(store).start_workflow(spawns_in_a_loop, 10)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == [10 * i + 1 for i in range(10)]
    _ran_once_each()
    assert len(RAN) == 20


@workflow
async def background_beside_own_steps(n: int) -> list[int]:
    async def background() -> list[int]:
        return [await process(100 + i) for i in range(n)]

    task = asyncio.create_task(background())
    mine = [await prepare(i) for i in range(n)]
    await durable_core.sleep(timedelta(seconds=1))
    return mine + await task


async def test_a_background_task_beside_the_bodys_own_steps_replays_its_own_results(
    store: Store,
) -> None:
    """Defect 1: a branch started beside the parent's own steps took the parent's places."""
    handle = await DurableClient(store).start_workflow(background_beside_own_steps, 5)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == [0, 10, 20, 30, 40, 101, 102, 103, 104, 105]
    _ran_once_each()


@workflow
async def child_of_branch(item: str) -> str:
    RAN[f"child {item}"] += 1
    return item.upper()


@workflow
async def effects_in_branches(items: list[str]) -> list[str]:
    me = durable_core.WorkflowContext.current()
    assert me is not None

    async def one(item: str) -> str:
        await prepare(len(item))
        child = await durable_core.start_workflow(child_of_branch, item)
        await durable_core.write_stream("log", item)
        await durable_core.send(me.workflow_id, item, topic="echo")
        return await child.output()

    async with anyio.create_task_group() as group:
        results: dict[str, str] = {}

        async def keep(item: str) -> None:
            results[item] = await one(item)

        for item in items:
            await process(len(item))
            group.start_soon(keep, item)
    await durable_core.sleep(timedelta(seconds=1))
    await durable_core.close_stream("log")
    return [results[item] for item in items]


async def test_children_streams_and_sends_of_branches_happen_once(store: Store) -> None:
    """Defect 2: a replay started the same child twice, wrote a stream item twice
    (['one', 'two', 'two']) and sent a message twice."""
    client = DurableClient(store)
    handle = await client.start_workflow(effects_in_branches, ["one", "two", "three"])
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == ["ONE", "TWO", "THREE"]
    children = await client.list_workflows(parent_id=handle.id)
    assert sorted(c.input for c in children) == sorted(
        f'{{"args":["{item}"],"kwargs":{{}}}}' for item in ("one", "two", "three")
    )
    assert sorted([value async for value in handle.read_stream("log")]) == ["one", "three", "two"]
    assert [RAN[f"child {item}"] for item in ("one", "two", "three")] == [1, 1, 1]
    echoed = [s for s in await handle.steps() if s.step_name == "durable.send"]
    assert len(echoed) == 3


@workflow
async def gathered_subgroups() -> list[int]:
    async def group(k: int) -> int:
        a, b = await asyncio.gather(prepare(k), prepare(k + 100))
        return await process(a + b)

    results = await asyncio.gather(group(1), group(2), group(3))
    await durable_core.sleep(timedelta(seconds=1))
    return list(results)


async def test_a_gather_of_subgroups_each_followed_by_a_step_replays(store: Store) -> None:
    """Defect 3: raised StepInputMismatchError on its first replay."""
    handle = await DurableClient(store).start_workflow(gathered_subgroups)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == [1021, 1041, 1061]
    _ran_once_each()


@workflow
async def producer_and_consumer(n: int) -> list[int]:
    queue: asyncio.Queue[int | None] = asyncio.Queue()

    async def producer() -> None:
        for i in range(n):
            await queue.put(await prepare(i))
        await queue.put(None)

    async def consumer() -> list[int]:
        taken = []
        while (x := await queue.get()) is not None:
            taken.append(await process(x))
        return taken

    producing = asyncio.create_task(producer())
    consuming = asyncio.create_task(consumer())
    mine = [await process(1000 + i) for i in range(3)]  # the body's own steps meanwhile
    await producing
    taken = await consuming
    await durable_core.sleep(timedelta(seconds=1))
    return mine + taken


async def test_a_producer_and_a_consumer_sharing_a_queue_replay(store: Store) -> None:
    """Defect 3: raised StepInputMismatchError on its first replay. One consumer takes
    the items in the order they were put, whatever the body's own steps do meanwhile:
    deterministic. (Several consumers of one queue are not: which takes which item
    depends on how long each step took.)"""
    handle = await DurableClient(store).start_workflow(producer_and_consumer, 6)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == [1001, 1002, 1003] + [10 * i + 1 for i in range(6)]
    _ran_once_each()


@workflow_step
async def refuse(reason: str) -> None:
    RAN[f"refuse {reason}"] += 1
    raise NonRetryableError(reason)


@workflow
async def refusal_beside_a_sleep() -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(durable_core.sleep, timedelta(hours=1))
        group.start_soon(refuse, "no stock")


async def test_a_non_retryable_error_in_a_task_group_fails_the_workflow_once(
    store: Store,
) -> None:
    """Defect 9: recorded as ExceptionGroup and retried: 3 attempts, the step ran 3 times."""
    handle = await DurableClient(store).start_workflow(refusal_beside_a_sleep)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    assert RAN["refuse no stock"] == 1
    info = await handle.info()
    assert info.attempts == 1
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.NonRetryableError"
    assert error["message"] == "no stock"


class OutOfStock(Exception):
    """A typed error that must cross the workflow boundary as itself."""


@workflow_step(retry=RetryPolicy(max_attempts=5, give_up_on=(OutOfStock,), initial_interval=0))
async def reserve_stock(item: str) -> str:
    RAN[f"reserve {item}"] += 1
    raise OutOfStock(item)


@workflow(max_attempts=3)
async def reserves_in_a_group(items: list[str]) -> None:
    async with anyio.create_task_group() as group:
        for item in items:
            group.start_soon(reserve_stock, item)
        group.start_soon(durable_core.sleep, timedelta(hours=1))


@workflow
async def parent_of_reserves(items: list[str]) -> str:
    child = await durable_core.start_workflow(reserves_in_a_group, items)
    try:
        await child.output()
    except OutOfStock as exc:
        return f"out of stock: {str(exc).rsplit(': ', 1)[-1]}"
    return "reserved"


async def test_give_up_on_and_typed_errors_see_through_a_task_group(store: Store) -> None:
    """A step policy's give_up_on and the error type a parent reads see through the task
    group: the step runs once, its workflow fails at once, the parent catches its type."""
    handle = await DurableClient(store).start_workflow(parent_of_reserves, ["lamp"])
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "out of stock: lamp"
    assert RAN["reserve lamp"] == 1


@workflow_step
async def release(item: str) -> None:
    RAN[f"release {item}"] += 1


@workflow
async def saga_around_a_group(items: list[str]) -> str:
    try:
        async with saga() as undo, anyio.create_task_group() as group:
            for item in items:
                await undo.compensate(release, await prepare(len(item)))
            group.start_soon(refuse, "card declined")
    except durable_core.CompensatedError as exc:
        return f"{exc.original['type']}: {exc.original['message']}; {list(exc.compensations)}"
    return "kept"


async def test_a_saga_reads_the_error_of_a_failed_branch(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(saga_around_a_group, ["ab", "cde"])
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    name = f"{release.name}"
    assert await handle.output() == (
        f"durable_core.errors.NonRetryableError: card declined; {[name, name]}"
    )
    assert RAN["release 30"] == RAN["release 20"] == 1


@workflow
async def starts_branches_by_input(order: list[int]) -> list[int]:
    async def one(i: int) -> int:
        return await prepare(i)

    tasks = [asyncio.create_task(one(i)) for i in order]
    first = list(await asyncio.gather(*tasks))
    await durable_core.sleep(timedelta(seconds=1))
    return [*first, await process(0)]


async def test_a_replay_that_would_leave_recorded_work_behind_raises(store: Store) -> None:
    """A body that starts fewer branches on its replay than it did (here: its code was
    changed to start one less) fails with HistoryDivergedError naming the recorded call it
    left behind, instead of succeeding as if it had not been made."""
    handle = await DurableClient(store).start_workflow(starts_branches_by_input, [1, 2, 3])
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    original = starts_branches_by_input.fn

    async def fewer(order: list[int]) -> list[int]:
        return await original(order[:2])

    starts_branches_by_input.fn = fewer
    try:
        assert await run.run_until_complete(handle) is WorkflowStatus.FAILED
    finally:
        starts_branches_by_input.fn = original
    error = await handle.error()
    assert error is not None and error["type"].endswith(HistoryDivergedError.__name__)
    assert f"returned while its history holds {prepare.name!r} at path 2:0" in error["message"]
    with pytest.raises(WorkflowFailedError):
        await handle.output()


@workflow
async def branches_then_more(n: int) -> list[int]:
    async def one(i: int) -> int:
        return await process(await prepare(i))

    first = list(await asyncio.gather(*(one(i) for i in range(n))))
    await durable_core.sleep(timedelta(seconds=1))
    return [*first, await process(0)]


async def test_a_new_call_after_a_branch_ended_short_of_its_history_raises(store: Store) -> None:
    """A branch that ends on its replay without making calls it recorded (its code changed)
    leaves them unreachable: the next new call raises HistoryDivergedError naming both, and
    runs nothing."""
    handle = await DurableClient(store).start_workflow(branches_then_more, 2)
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    original = branches_then_more.fn

    async def shorter(n: int) -> list[int]:
        async def one(i: int) -> int:
            return await prepare(i)

        first = list(await asyncio.gather(*(one(i) for i in range(n))))
        await durable_core.sleep(timedelta(seconds=1))
        return [*first, await process(0)]

    branches_then_more.fn = shorter
    try:
        assert await run.run_until_complete(handle) is WorkflowStatus.FAILED
    finally:
        branches_then_more.fn = original
    error = await handle.error()
    assert error is not None and error["type"].endswith(HistoryDivergedError.__name__)
    assert f"made a new call {process.name!r} at path 1" in error["message"], error["message"]
    assert f"holds {process.name!r} at path 0:1" in error["message"], error["message"]
    assert RAN["process 0"] == 1, "only the first run's branch ran it: the new call did not"


@workflow_step
async def lingers(key: str) -> str:
    RAN[f"lingers {key}"] += 1
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        RAN[f"lingers {key} cancelled"] += 1
        raise
    return key


@workflow
async def gather_whose_member_fails() -> list[str | None]:
    async def slow_branch() -> str:
        await lingers("a")
        return await fz_after_linger()

    return list(await asyncio.gather(slow_branch(), refuse("at once")))


@workflow_step
async def fz_after_linger() -> str:
    RAN["after linger"] += 1
    return "after"


async def test_a_gather_member_left_running_by_a_failed_sibling_is_stopped_before_settling(
    store: Store,
) -> None:
    """When one member of asyncio.gather fails, gather returns at once and leaves the others
    running: their steps would go on after the attempt settled. They are cancelled, and
    the attempt settles once they have ended (issue 34, suspected defect)."""
    handle = await DurableClient(store).start_workflow(gather_whose_member_fails)
    assert await runner(store).run_once(handle) is WorkflowStatus.FAILED
    assert RAN["lingers a"] == 1
    assert RAN["lingers a cancelled"] == 1, "the left-behind member was stopped before settling"
    assert RAN["after linger"] == 0


@workflow
async def sends_itself_after_a_while(turns: int) -> str:
    me = durable_core.WorkflowContext.current()
    assert me is not None

    async def busy_then_send() -> None:
        for _ in range(turns):  # ready to run all along, but not in a durable call
            await asyncio.sleep(0)
        await durable_core.send(me.workflow_id, "go", topic="go")

    async with anyio.create_task_group() as group:
        group.start_soon(busy_then_send)
        got = await durable_core.recv("go")
    return str(got)


async def test_a_branch_ready_to_run_keeps_its_workflow_from_suspending(store: Store) -> None:
    """One branch waits for a message that another sends once it has had thousands of turns
    of the loop: the workflow used to suspend after three turns, waiting for a message its
    own stopped branch was about to send, and nothing ever woke it (issue 34, suspected)."""
    handle = await DurableClient(store).start_workflow(sends_itself_after_a_while, 5000)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "go"
    assert (await handle.info()).attempts == 1


@workflow
async def steps_from_an_unnamed_task() -> str:
    loop = asyncio.get_running_loop()
    ours = loop.get_task_factory()
    loop.set_task_factory(None)  # a task made without the factory that names branches
    try:
        task = asyncio.create_task(prepare(1))
    finally:
        loop.set_task_factory(ours)
    return str(await task)


async def test_a_durable_call_from_a_task_made_past_the_task_factory_is_refused(
    store: Store,
) -> None:
    handle = await DurableClient(store).start_workflow(steps_from_an_unnamed_task)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    assert RAN["prepare 1"] == 0
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.ConfigurationError"
    assert "from a task it cannot place" in error["message"]
    assert (await handle.info()).attempts == 1
