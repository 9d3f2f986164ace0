"""The workflows the benchmarks run, in worker processes (``--app bench.app``) and in-process.

Step bodies are trivial on purpose: the figures measure the framework and the
database, not user code. The floor (:mod:`bench.floor`) writes step inputs and
outputs of the same size and shape as these steps produce.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from durable_core import (
    TransactionStep,
    WorkflowContext,
    close_stream,
    recv,
    recv_update,
    set_event,
    sleep,
    start_workflows,
    transaction_step,
    workflow,
    workflow_step,
    write_stream,
)


@workflow_step
async def first(n: int) -> int:
    return n + 1


@workflow_step
async def second(n: int) -> int:
    return n * 2


@workflow_step
async def third(n: int) -> int:
    return n - 3


@workflow
async def three_steps(n: int) -> int:
    """The end-to-end workflow: three trivial steps, each persisted."""
    return await third(await second(await first(n)))


@workflow_step
async def mark() -> str:
    return "ok"


@workflow
async def one_step() -> str:
    """The latency workflow: its first step's ``started_at`` is the start time."""
    return await mark()


@workflow_step
async def hold(seconds: float) -> float:
    await anyio.sleep(seconds)
    return seconds


@workflow
async def holding(seconds: float) -> float:
    """The memory workflow: stays in flight inside a step for ``seconds``."""
    return await hold(seconds)


@workflow_step
async def woke() -> str:
    return "ok"


@workflow
async def wait_for_go() -> str:
    """The wake-up workflow: suspends in ``recv("go")``; the ``started_at`` of the step
    after it (``woke``, step index 1) is when the message woke it."""
    await recv("go")
    return await woke()


@workflow
async def parked(sleep_seconds: float | None) -> str:
    """The waiting-memory workflow: one step, then a durable wait that outlasts the run,
    a ``recv`` (``sleep_seconds`` None) or a ``sleep``."""
    await mark()
    if sleep_seconds is None:
        await recv("never")
    else:
        await sleep(sleep_seconds)
    return "woke"


async def bare_add(n: int) -> int:
    """What a step body costs called directly."""
    return n + 1


add_one = workflow_step(name="bench.app.add_one")(bare_add)

step_times: list[float] = []
"""Seconds per step call, filled by :func:`many_steps` (in-process runs only)."""


@workflow
async def many_steps(count: int) -> int:
    """Calls ``count`` persisted steps, timing each call into :data:`step_times`."""
    n = 0
    clock = time.perf_counter
    for _ in range(count):
        started = clock()
        n = await add_one(n)
        step_times.append(clock() - started)
    return n


BENCH_ROWS = "bench_tx_rows"
"""The application table the transaction-step figures insert into (one row a step)."""


async def insert_row(conn: AsyncConnection, workflow_id: str, n: int) -> int:
    """A transaction step's body: one INSERT on the connection it is given."""
    await conn.execute(_INSERT, {"workflow": workflow_id, "n": n})
    return n + 1


_INSERT = sa.text(f"INSERT INTO {BENCH_ROWS} (workflow_id, n) VALUES (:workflow, :n)")
insert_here = transaction_step(name="bench.app.insert_row")(insert_row)
"""The transaction step on the store's own database."""
ELSEWHERE: dict[str, TransactionStep[[str, int], int]] = {}
"""The transaction step on another database, set by the bench (``"step"``)."""
PLAIN_ENGINE: dict[str, AsyncEngine] = {}
"""The engine the plain step inserts through, set by the bench (``"engine"``)."""


@workflow_step(name="bench.app.insert_plainly")
async def insert_plainly(workflow_id: str, n: int) -> int:
    """A plain step doing the same INSERT in a transaction of its own (at least once)."""
    async with PLAIN_ENGINE["engine"].begin() as conn:
        return await insert_row(conn, workflow_id, n)


@workflow
async def many_inserts(count: int, how: str) -> int:
    """Calls ``count`` steps that each insert a row (``how``: ``here``, ``elsewhere`` or
    ``plain``), timing each call into :data:`step_times`."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    step: Callable[[str, int], Awaitable[int]] = (
        insert_here if how == "here" else insert_plainly if how == "plain" else ELSEWHERE["step"]
    )
    n = 0
    clock = time.perf_counter
    for _ in range(count):
        started = clock()
        n = await step(ctx.workflow_id, n)
        step_times.append(clock() - started)
    return n


@workflow
async def child(n: int) -> int:
    """A child of the fan-out workflows: one step."""
    return await first(n)


@workflow
async def gather_children(n: int) -> int:
    """Start ``n`` children, join them all at once (``asyncio.gather``)."""
    children = await start_workflows(child, [(i,) for i in range(n)])
    return sum(await asyncio.gather(*(c.output() for c in children)))


@workflow
async def join_children_in_turn(n: int) -> int:
    """Start ``n`` children, join them one after another (the pattern before gather)."""
    children = await start_workflows(child, [(i,) for i in range(n)])
    return sum([await c.output() for c in children])


@workflow_step
async def io_call(i: int, seconds: float) -> int:
    """A step waiting on I/O (a remote call) for ``seconds``."""
    await anyio.sleep(seconds)
    return i


@workflow
async def gather_io_steps(n: int, seconds: float) -> int:
    """``n`` I/O steps side by side (``asyncio.gather``)."""
    return sum(await asyncio.gather(*(io_call(i, seconds) for i in range(n))))


@workflow
async def io_steps_in_turn(n: int, seconds: float) -> int:
    """``n`` I/O steps one after another."""
    return sum([await io_call(i, seconds) for i in range(n)])


@workflow
async def stream_values(n: int) -> int:
    """Writes 0..n-1 to the stream ``values``, then closes it (the ``streams`` scenario)."""
    for i in range(n):
        await write_stream("values", i)
    await close_stream("values")
    return n


@workflow
async def answer_updates(n: int) -> int:
    """Answers ``n`` updates ``ask`` with their payload (the ``updates`` scenario)."""
    for _ in range(n):
        req = await recv_update("ask")
        assert req is not None
        await req.reply(req.payload)
    return n


@workflow
async def answer_messages(n: int) -> int:
    """Answers ``n`` messages ``ask`` by publishing each as the event ``reply-<i>``: the
    ``updates`` scenario's floor, a request and response built from send and events."""
    for i in range(n):
        value = await recv("ask")
        await set_event(f"reply-{i}", value)
    return n
