"""Streams end to end on every backend: a body writes, callers read while it runs, from any
offset; a retried body writes nothing twice; bad input gets a clear error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    FrameworkError,
    StreamClosedError,
    WorkflowNotFoundError,
    WorkflowStatus,
    close_stream,
    current_store,
    recv,
    workflow,
    workflow_step,
    write_stream,
)
from durable_core.seams.store import Store, Streams
from durable_core.testing import WorkflowRunner
from tests.side_effects import effect
from tests.talk_support import talk_store

__all__ = ["talk_store"]

pytestmark = pytest.mark.anyio

FAILED_ONCE: set[str] = set()


@workflow
async def counts_to(n: int, then_close: bool) -> int:
    for i in range(n):
        await write_stream("progress", {"done": i})
    if then_close:
        await close_stream("progress")
    return n


@workflow
async def paced(n: int) -> int:
    """Writes ``n`` values, each once a message on ``go`` asks for it."""
    for i in range(n):
        await recv("go")
        await write_stream("tokens", f"t{i}")
    await close_stream("tokens")
    return n


@workflow_step
async def flaky(tag: str) -> str:
    effect(f"flaky:{tag}")
    if tag not in FAILED_ONCE:
        FAILED_ONCE.add(tag)
        raise RuntimeError(f"first try of {tag} fails")
    return tag


@workflow
async def writes_then_fails_once(tag: str) -> str:
    await write_stream("s", "before")
    await write_stream("s", "again")
    await flaky(tag)
    await write_stream("s", "after")
    return tag


@workflow
async def branches_write(n: int) -> int:
    async def branch(b: int) -> None:
        for i in range(n):
            await write_stream("mixed", [b, i])

    await asyncio.gather(branch(0), branch(1))
    return n


@workflow
async def writes_after_closing() -> None:
    await close_stream("s")
    await write_stream("s", 1)


@workflow
async def reads_in_its_body(other: str) -> None:
    async for _ in DurableClient(current_store()).handle(other).read_stream("s"):
        pass


@workflow
async def writes_no_json() -> None:
    await write_stream("s", object())


async def read_all(store: Store, workflow_id: str, key: str, offset: int = 0) -> list[Any]:
    handle = DurableClient(store).handle(workflow_id)
    return [value async for value in handle.read_stream(key, offset=offset)]


async def test_a_caller_reads_every_value_in_order_while_the_body_writes(
    talk_store: Store,
) -> None:
    client = DurableClient(talk_store)
    handle = await client.start_workflow(paced, 5)
    runner = WorkflowRunner(talk_store)
    seen: list[Any] = []

    async def read() -> None:
        async for value in handle.read_stream("tokens"):
            seen.append(value)
            if len(seen) < 5:
                await client.send(handle.id, None, topic="go")  # the next value only now

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await client.send(handle.id, None, topic="go")
        status = await handle.status()
        while not status.is_terminal:  # run it whenever the reader's message woke it
            if status is WorkflowStatus.WAITING:
                await anyio.sleep(0.01)
                status = await handle.status()
            else:
                status = await runner.run_once(handle)
    assert status is WorkflowStatus.SUCCEEDED
    assert seen == ["t0", "t1", "t2", "t3", "t4"]
    assert await read_all(talk_store, handle.id, "tokens", offset=3) == ["t3", "t4"]
    assert await read_all(talk_store, handle.id, "tokens", offset=5) == []


async def test_reading_ends_when_the_workflow_ends_without_closing(talk_store: Store) -> None:
    client = DurableClient(talk_store)
    closed = await client.start_workflow(counts_to, 3, True)
    open_ = await client.start_workflow(counts_to, 2, False)
    runner = WorkflowRunner(talk_store)
    for handle in (closed, open_):
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await read_all(talk_store, closed.id, "progress") == [{"done": i} for i in range(3)]
    assert await read_all(talk_store, open_.id, "progress") == [{"done": 0}, {"done": 1}]
    assert await read_all(talk_store, open_.id, "never-written") == []


async def test_a_retried_body_writes_no_value_twice(
    talk_store: Store, effects: Callable[[str], int]
) -> None:
    FAILED_ONCE.clear()
    handle = await DurableClient(talk_store).start_workflow(writes_then_fails_once, "x")
    runner = WorkflowRunner(talk_store)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING  # the step failed
    assert isinstance(talk_store, Streams)
    page = await talk_store.read_stream(handle.id, "s")  # it runs on: no reader would end
    assert page.entries == [(0, '"before"'), (1, '"again"')]
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert effects("flaky:x") == 2
    assert await read_all(talk_store, handle.id, "s") == ["before", "again", "after"]
    names = [step.step_name for step in await handle.steps()]
    assert names.count("durable.write_stream") == 3


async def test_concurrent_branches_take_distinct_offsets(talk_store: Store) -> None:
    handle = await DurableClient(talk_store).start_workflow(branches_write, 4)
    assert await WorkflowRunner(talk_store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    values = await read_all(talk_store, handle.id, "mixed")
    assert sorted(map(tuple, values)) == [(b, i) for b in (0, 1) for i in range(4)]
    for b in (0, 1):
        assert [i for bb, i in values if bb == b] == [0, 1, 2, 3], "each branch in its order"


async def test_bad_input_gets_a_clear_error(talk_store: Store) -> None:
    with pytest.raises(FrameworkError, match=r"write_stream\(\) works only in a workflow body"):
        await write_stream("s", 1)
    with pytest.raises(FrameworkError, match=r"close_stream\(\) works only in a workflow body"):
        await close_stream("s")
    client = DurableClient(talk_store)
    runner = WorkflowRunner(talk_store)
    handle = await client.start_workflow(counts_to, 1, True)
    for key, offset, problem in (
        ("", 0, "a stream key is a non-empty string"),
        ("x" * 256, 0, "at most 255 characters"),
        ("s", -1, "a stream offset is an int >= 0, got -1"),
        ("s", "3", "a stream offset is an int >= 0, got '3'"),
    ):
        with pytest.raises(ConfigurationError, match=problem):
            await read_all(talk_store, handle.id, key, offset)  # type: ignore[arg-type]
    with pytest.raises(WorkflowNotFoundError, match="no workflow with id 'nope'"):
        await read_all(talk_store, "nope", "s")

    closed = await client.start_workflow(writes_after_closing)
    assert await runner.run_until_complete(closed) is WorkflowStatus.FAILED
    with pytest.raises(StreamClosedError, match="wrote to stream 's' after closing it"):
        await closed.output()
    reader = await client.start_workflow(reads_in_its_body, handle.id)
    assert await runner.run_until_complete(reader) is WorkflowStatus.FAILED
    with pytest.raises(FrameworkError, match=r"read_stream\(\) cannot run in a workflow body"):
        await reader.output()
    bad = await client.start_workflow(writes_no_json)
    assert await runner.run_until_complete(bad) is WorkflowStatus.FAILED
    error = await bad.error()
    assert error is not None and "value of stream 's'" in error["message"]
    assert await read_all(talk_store, bad.id, "s") == []
