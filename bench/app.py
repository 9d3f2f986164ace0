"""The workflows the benchmarks run, in worker processes (``--app bench.app``) and in-process.

Step bodies are trivial on purpose: the figures measure the framework and the
database, not user code. The floor (:mod:`bench.floor`) writes step inputs and
outputs of the same size and shape as these steps produce.
"""

from __future__ import annotations

import time

import anyio

from durable_core import recv, sleep, workflow, workflow_step


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
