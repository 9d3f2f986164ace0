"""A replay fuzzer: generated concurrent bodies, run with random delays inside their steps,
suspended by their own sleeps and crashed at random moments, must end as the same body
run without interruption would: the same output, every step that committed run no more,
every effect (a child, a stream item, a message) made once, and no determinism error.

A body's shape is a tree of operations: steps, durable sleeps, messages received,
children started and joined, stream writes, sends, a step that fails once and is retried,
a step that always refuses (caught by the body), and branches (``asyncio.gather``,
``asyncio.create_task``, anyio and asyncio task groups, and a loop that starts a branch
after each of its own steps) nested in each other. One interpreter workflow runs any
shape, so a shape needs no code of its own.

``make test`` runs the ``ci`` profile (a fixed set of shapes); ``make fuzz`` the ``long``
one (``DURABLE_FUZZ_PROFILE=long``, new shapes on every run). In-process on PostgreSQL,
with the runner's clock; a crash is the attempt's task cancelled outright (nothing it
had not committed is kept), its connections closed (the server rolls back what they had
begun) and its lease expired. (SQLite is not fuzzed: a SQLite connection cancelled in the
middle of a write keeps its lock until its thread ends, which a real crash ends but a
cancelled task cannot.)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import asyncpg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import durable_core
from durable_core import (
    DurableClient,
    NonRetryableError,
    RetryPolicy,
    WorkflowHandle,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.runtime.config import WorkflowConfig
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from tests.conftest import POSTGRES_URL, drop_postgres_database, migrated_postgres_database

settings.register_profile(
    "ci",
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("DURABLE_FUZZ_EXAMPLES", "1000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.generate]
    if os.environ.get("DURABLE_FUZZ_SHRINK") == "0"
    else list(Phase),
)
PROFILE = os.environ.get("DURABLE_FUZZ_PROFILE", "ci")

LEAVES = ("step", "sleep", "recv", "child", "stream", "send", "flaky", "refuse")
SPAWNS = ("gather", "create_task", "anyio", "taskgroup")

# -- what the generated bodies run ------------------------------------------------------------


@dataclass
class Run:
    """What one fuzzed workflow did, as its steps and children saw it."""

    epoch: int = 0
    """The attempt being run (bumped before every attempt of the fuzzed workflow)."""
    runs: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    """Each step label: the epochs it ran in."""
    failed_once: set[str] = field(default_factory=set)
    """The flaky steps that have failed their one time."""
    children: Counter[str] = field(default_factory=Counter)


RUN = Run()
TRIED: Counter[str] = Counter()
"""What the fuzzer tried: bodies, operations, attempts, crashes, suspensions."""


@workflow_step
async def fz_step(label: str) -> str:
    RUN.runs[label].append(RUN.epoch)
    await anyio.sleep(random.random() * 0.004)
    return f"v{label}"


@workflow_step(retry=RetryPolicy(max_attempts=3, initial_interval=0))
async def fz_flaky(label: str) -> str:
    RUN.runs[label].append(RUN.epoch)
    await anyio.sleep(random.random() * 0.002)
    if label not in RUN.failed_once:
        RUN.failed_once.add(label)
        raise RuntimeError(f"first try of {label} fails")
    return f"f{label}"


@workflow_step
async def fz_refuse(label: str) -> str:
    await anyio.sleep(random.random() * 0.002)
    raise NonRetryableError(f"refused {label}")


@workflow
async def fz_child(label: str) -> str:
    RUN.children[label] += 1
    return f"c{label}"


@workflow(max_attempts=50)
async def fz_body(shape: list[Any], sink: str) -> Any:
    """Run ``shape`` (see the module): its value, which only the shape decides."""
    return await _block(shape, "", sink)


async def _block(ops: list[Any], at: str, sink: str) -> list[Any]:
    return [await _op(op, f"{at}{n}.", sink) for n, op in enumerate(ops)]


async def _op(op: list[Any], at: str, sink: str) -> Any:
    kind = op[0]
    label = at.rstrip(".")
    if kind == "step":
        return await fz_step(label)
    if kind == "sleep":
        await durable_core.sleep(1)
        return "slept"
    if kind == "recv":
        return await durable_core.recv(f"t{label}")
    if kind == "child":
        child = await durable_core.start_workflow(fz_child, label)
        return await child.output()
    if kind == "stream":
        await durable_core.write_stream("items", label)
        return "streamed"
    if kind == "send":
        await durable_core.send(sink, label, topic="fz")
        return "sent"
    if kind == "flaky":
        return await fz_flaky(label)
    if kind == "refuse":
        try:
            return await fz_refuse(label)
        except NonRetryableError as exc:
            return str(exc)
    if kind == "loop":  # a branch after each of its own steps
        _, n, inner = op
        results: dict[int, Any] = {}

        async def branch(i: int) -> None:
            results[i] = await _block(inner, f"{at}b{i}.", sink)

        async with anyio.create_task_group() as group:
            for i in range(n):
                await fz_step(f"{label}.s{i}")
                group.start_soon(branch, i)
        return [results[i] for i in range(n)]
    _, mode, blocks = op
    coros = [_block(inner, f"{at}{i}.", sink) for i, inner in enumerate(blocks)]
    if mode == "gather":
        return list(await asyncio.gather(*coros))
    if mode == "create_task":
        tasks = [asyncio.create_task(c) for c in coros]
        return [await task for task in tasks]
    if mode == "taskgroup":
        async with asyncio.TaskGroup() as together:
            started = [together.create_task(c) for c in coros]
        return [task.result() for task in started]
    out: list[Any] = [None] * len(coros)

    async def keep(i: int, coro: Any) -> None:
        out[i] = await coro

    async with anyio.create_task_group() as group:
        for i, coro in enumerate(coros):
            group.start_soon(keep, i, coro)
    return out


@workflow
async def fz_sink() -> None:
    """Where the fuzzed bodies send (it never runs: the test counts its messages)."""


# -- what a shape should give --------------------------------------------------------------------


def expected(ops: list[Any], at: str = "") -> list[Any]:
    """The value :func:`fz_body` returns for ``ops``, run without interruption."""
    out: list[Any] = []
    for n, op in enumerate(ops):
        here = f"{at}{n}."
        label = here.rstrip(".")
        kind = op[0]
        if kind == "step":
            out.append(f"v{label}")
        elif kind == "sleep":
            out.append("slept")
        elif kind == "recv":
            out.append(f"m{label}")
        elif kind == "child":
            out.append(f"c{label}")
        elif kind == "stream":
            out.append("streamed")
        elif kind == "send":
            out.append("sent")
        elif kind == "flaky":
            out.append(f"f{label}")
        elif kind == "refuse":
            out.append(f"refused {label}")
        elif kind == "loop":
            out.append([expected(op[2], f"{here}b{i}.") for i in range(op[1])])
        else:
            out.append([expected(inner, f"{here}{i}.") for i, inner in enumerate(op[2])])
    return out


def labels(ops: list[Any], at: str = "") -> dict[str, list[str]]:
    """Each leaf kind: the labels its operations run with."""
    found: dict[str, list[str]] = defaultdict(list)
    for n, op in enumerate(ops):
        here = f"{at}{n}."
        if op[0] in LEAVES:
            found[op[0]].append(here.rstrip("."))
        elif op[0] == "loop":
            found["step"].extend(f"{here.rstrip('.')}.s{i}" for i in range(op[1]))
            for i in range(op[1]):
                for kind, more in labels(op[2], f"{here}b{i}.").items():
                    found[kind].extend(more)
        else:
            for i, inner in enumerate(op[2]):
                for kind, more in labels(inner, f"{here}{i}.").items():
                    found[kind].extend(more)
    return found


# -- shapes -------------------------------------------------------------------------------------

leaf = st.sampled_from(LEAVES).map(lambda kind: [kind])


def _nest(inner: st.SearchStrategy[list[Any]]) -> st.SearchStrategy[list[Any]]:
    branches = st.lists(inner, min_size=1, max_size=3)
    spawn = st.tuples(st.sampled_from(SPAWNS), branches).map(lambda t: ["spawn", t[0], t[1]])
    loop = st.tuples(st.integers(1, 3), inner).map(lambda t: ["loop", t[0], t[1]])
    return st.lists(st.one_of(leaf, spawn, loop), min_size=1, max_size=4)


shapes = st.recursive(st.lists(leaf, min_size=1, max_size=4), _nest, max_leaves=16)
crashes = st.lists(st.floats(0.0, 0.03), max_size=3)
"""After how many seconds each of the first attempts is crashed."""


# -- the run ------------------------------------------------------------------------------------


async def _expire_lease(sql: asyncpg.Connection, workflow_id: str) -> None:
    await sql.execute(
        "UPDATE workflows SET locked_until = now() - interval '1 hour' WHERE id = $1",
        workflow_id,
    )


async def _committed_steps(sql: asyncpg.Connection, workflow_id: str) -> set[str]:
    rows = await sql.fetch(
        "SELECT input FROM workflow_steps WHERE workflow_id = $1 AND status = 'succeeded'"
        " AND step_name = any($2)",
        workflow_id,
        [fz_step.name, fz_flaky.name],
    )
    return {json.loads(row["input"])["args"][0] for row in rows}


async def _crashed(runner: WorkflowRunner, handle: WorkflowHandle[Any], after: float) -> None:
    """Run one attempt and cancel it outright ``after`` seconds in (if it is still going)."""
    with anyio.CancelScope() as scope:

        async def kill() -> None:
            await anyio.sleep(after)
            scope.cancel()  # the worker's own cancellation: nothing more is written

        async with anyio.create_task_group() as group:
            group.start_soon(kill)
            await runner.run_once(handle)
            group.cancel_scope.cancel()


async def _drive(
    store: PostgresStore,
    sql: asyncpg.Connection,
    shape: list[Any],
    crash_after: list[float],
    sink: str,
) -> tuple[WorkflowHandle[Any], list[set[str]]]:
    """Run ``shape`` to its end, crashing its first attempts; what had committed before each
    of its attempts."""
    client = DurableClient(store)
    runner = WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0, max_attempts=50))
    handle = await client.start_workflow(fz_body, shape, sink)
    for label in labels(shape)["recv"]:  # each recv finds its message waiting
        await client.send(handle.id, f"m{label}", topic=f"t{label}")
    before: list[set[str]] = []
    plan = list(crash_after)
    for _ in range(500):
        info = await handle.info()
        if info.status.is_terminal:
            return handle, before
        if info.status is WorkflowStatus.WAITING:
            TRIED["suspensions"] += 1
            if not await runner.drain():
                assert info.wake_at is not None, f"waits for {info.waiting_for}"
                runner.clock.advance_to(info.wake_at)
            continue
        if info.status is WorkflowStatus.RUNNING:  # a crashed attempt's lease
            await _expire_lease(sql, handle.id)
        before.append(await _committed_steps(sql, handle.id))
        RUN.epoch = len(before)
        TRIED["attempts"] += 1
        if plan:
            TRIED["crashes"] += 1
            await _crashed(runner, handle, plan.pop(0))
            # A crashed process's connections die with it (and SQLite's locks with them).
            await store.close()
            await store.open()
        else:
            await runner.run_once(handle)
    raise AssertionError(f"workflow {handle.id} did not end in 500 rounds")


def _crash_debris(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> bool:
    """Whether the loop reports what a crash left behind: the result of a query whose task
    was cancelled outright, its connection closed under it, that nobody reads any more."""
    error = context.get("exception")
    return isinstance(error, ConnectionError | asyncpg.InterfaceError) and "never retrieved" in str(
        context.get("message", "")
    )


async def _check(url: str, shape: list[Any], crash_after: list[float]) -> None:
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if _crash_debris(loop, context):
            return
        if previous is None:
            loop.default_exception_handler(context)
        else:
            previous(loop, context)

    loop.set_exception_handler(handle)
    try:
        await _check_body(url, shape, crash_after)
    finally:
        loop.set_exception_handler(previous)


async def _check_body(url: str, shape: list[Any], crash_after: list[float]) -> None:
    global RUN
    RUN = Run()
    TRIED["bodies"] += 1
    TRIED["operations"] += sum(len(found) for found in labels(shape).values())
    sql = await asyncpg.connect(url)
    try:
        async with PostgresStore(url) as store:
            client = DurableClient(store)
            sink = (await client.start_workflow(fz_sink)).id
            handle, before = await _drive(store, sql, shape, crash_after, sink)
            status = await handle.status()
            assert status is WorkflowStatus.SUCCEEDED, await handle.error()
            assert await handle.output() == expected(shape)
            _ran_once_after_commit(before)
            await _effects_once(sql, client, handle, shape, sink)
    finally:
        await sql.close()


def _ran_once_after_commit(before: list[set[str]]) -> None:
    """No step ran in an attempt that began after its output had committed."""
    for label, epochs in RUN.runs.items():
        for epoch in epochs:
            committed_before = before[epoch - 1] if epoch >= 1 else set()
            assert label not in committed_before, (
                f"step {label} ran in attempt {epoch} though it had committed before: {epochs}"
            )


async def _effects_once(
    sql: asyncpg.Connection,
    client: DurableClient,
    handle: WorkflowHandle[Any],
    shape: list[Any],
    sink: str,
) -> None:
    found = labels(shape)
    children = await client.list_workflows(parent_id=handle.id, limit=1000)
    started = Counter(json.loads(c.input)["args"][0] for c in children)
    assert started == Counter(found["child"]), "each child started once"
    assert RUN.children == Counter(found["child"]), "each child ran once"
    items = await sql.fetch("SELECT value FROM workflow_streams WHERE workflow_id = $1", handle.id)
    sent = await sql.fetch("SELECT payload FROM workflow_messages WHERE workflow_id = $1", sink)
    streamed = Counter(json.loads(row["value"]) for row in items)
    assert streamed == Counter(found["stream"]), "each stream item written once"
    assert Counter(json.loads(row["payload"]) for row in sent) == Counter(found["send"]), (
        "each message sent once"
    )


pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def database() -> AsyncIterator[str]:
    """A migrated PostgreSQL database the generated workflows share (each has ids of its own)."""
    url = await migrated_postgres_database(POSTGRES_URL, "durable_fuzz")
    url = url.replace("postgresql+asyncpg://", "postgresql://")
    yield url
    await drop_postgres_database(url)
    print(
        f"\nreplay fuzzer ({PROFILE}): {TRIED['bodies']} bodies, {TRIED['operations']} "
        f"operations, {TRIED['attempts']} attempts, {TRIED['crashes']} crashes, "
        f"{TRIED['suspensions']} suspensions",
        file=sys.__stderr__,
    )


@settings(settings.get_profile(PROFILE))
@given(shape=shapes, crash_after=crashes)
async def test_generated_concurrent_bodies_replay_exactly(
    shape: list[Any], crash_after: list[float], database: str
) -> None:
    await _check(database, shape, crash_after)
