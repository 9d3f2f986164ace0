"""Workflows run by worker processes in the worker tests.

Every step body records that it ran in the ``step_runs`` side table, so the
tests count real executions, not log lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import anyio
import asyncpg

from durable_core import (
    AttemptEvent,
    DurableClient,
    NonRetryableError,
    RetryPolicy,
    Schedule,
    Workflow,
    WorkflowContext,
    current_store,
    hookimpl,
    recv,
    register_observer,
    send,
    set_event,
    sleep,
    start_workflow,
    start_workflows,
    workflow,
    workflow_step,
)

SIDE_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS step_runs (
    workflow_id text NOT NULL,
    step text NOT NULL,
    attempt int NOT NULL,
    worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_pool: asyncpg.Pool | None = None
SIDE_TABLE_APP = "durable-tests-side-table"
"""The ``application_name`` of the side-table pool's sessions (only worker processes have one)."""


async def bootstrap() -> None:
    """Open the side-table pool (the worker calls this before claiming)."""
    global _pool
    url = os.environ["DURABLE_DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://")
    url = url.split("?", 1)[0]  # the store's own options (durable_listen) are not asyncpg's
    _pool = await asyncpg.create_pool(
        url, min_size=1, max_size=4, server_settings={"application_name": SIDE_TABLE_APP}
    )


async def record(step: str) -> None:
    ctx = WorkflowContext.current()
    assert ctx is not None and _pool is not None
    await _pool.execute(
        "INSERT INTO step_runs (workflow_id, step, attempt, worker) VALUES ($1, $2, $3, $4)",
        ctx.workflow_id,
        step,
        ctx.attempt,
        ctx.worker_id,
    )


@workflow_step
async def first(n: int) -> int:
    await record("first")
    return n + 1


@workflow_step
async def second(n: int) -> int:
    await record("second")
    return n * 2


@workflow_step
async def third(n: int) -> int:
    await record("third")
    return n - 3


@workflow
async def three_steps(n: int) -> int:
    return await third(await second(await first(n)))


@workflow_step
async def hang_on_first_attempt(n: int) -> int:
    """Runs for ``hang`` seconds on attempt 1, returns at once on later attempts."""
    await record("hang")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        await anyio.sleep(float(os.environ.get("TEST_HANG_SECONDS", "3600")))
    return n


@workflow_step
async def about_to_block() -> None:
    await record("block")


@workflow_step
def block_forever() -> None:
    """A plain def step that never returns: its worker thread cannot be cancelled."""
    while True:
        time.sleep(0.05)


@workflow
async def never_ending() -> None:
    await about_to_block()
    await block_forever()


@workflow_step
async def shields_itself() -> str:
    """On its first attempt, an hour in a scope of its own that no cancellation reaches:
    only the end of its process stops it."""
    await record("shielded")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(3600)
    return "done"


@workflow
async def shielded_step() -> str:
    return await shields_itself()


@workflow_step
async def blocks_the_loop() -> str:
    """On its first attempt, blocks its worker's event loop for an hour (the bug of a
    blocking call in an async step): its process hears nothing, not even a signal."""
    await record("blocking")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        time.sleep(3600)
    return "done"


@workflow
async def loop_blocked() -> str:
    return await blocks_the_loop()


@workflow
async def killed_mid_step(n: int) -> int:
    a = await first(n)
    b = await hang_on_first_attempt(a)
    return await third(b)


@workflow_step
async def slow(seconds: float) -> float:
    await record("slow")
    await anyio.sleep(seconds)
    return seconds


@workflow
async def slow_flow(seconds: float) -> float:
    return await slow(seconds)


@workflow_step
async def paced_step(i: int, pause: float) -> int:
    await record(f"paced{i}")
    await anyio.sleep(pause)
    return i


@workflow
async def paced(steps: int, pause: float) -> int:
    """``steps`` steps of ``pause`` seconds each; the sum of their indexes."""
    total = 0
    for i in range(steps):
        total += await paced_step(i, pause)
    return total


@workflow_step
async def mark_started() -> None:
    await record("started")


@workflow
async def instant() -> str:
    await mark_started()
    return "ok"


@workflow
async def settles_when_told(flag: str) -> str:
    """One step, then a wait that is not durable until the file ``flag`` exists (the test
    says when the settlement is written), then settle."""
    await mark_started()
    while not os.path.exists(flag):  # noqa: ASYNC110 -- another process makes the file
        await anyio.sleep(0.05)
    return "settled"


@workflow_step
async def whoami(seconds: float) -> str:
    """Sleeps, then returns the id of the worker that ran it."""
    await record("whoami")
    await anyio.sleep(seconds)
    ctx = WorkflowContext.current()
    assert ctx is not None
    return ctx.worker_id


@workflow
async def whoami_flow(seconds: float) -> str:
    return await whoami(seconds)


# -- waiting workflows (tests/worker/test_waiting_processes.py) ---------------------------------

RECEIPTS_DDL = """
CREATE TABLE IF NOT EXISTS receipts (
    workflow_id text NOT NULL,
    value text NOT NULL,
    attempt int NOT NULL,
    worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
"""What a step saw a workflow receive: one row per run of ``keep_receipt``."""


@workflow_step
async def woke() -> None:
    await record("woke")


@workflow
async def sleeper(seconds: float) -> str:
    """A durable sleep, then one step."""
    await sleep(seconds)
    await woke()
    return "rested"


@workflow_step
async def after_sleep(n: int) -> int:
    """The step after a sleep: blocks on attempt 1 (until the worker is killed)."""
    await record("after_sleep")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        await anyio.sleep(3600)
    return n * 10


@workflow
async def sleep_then_block(seconds: float, n: int) -> int:
    await sleep(seconds)
    return await after_sleep(n)


@workflow_step
async def keep_receipt(value: object) -> object:
    """Record in ``receipts`` what the body received."""
    ctx = WorkflowContext.current()
    assert ctx is not None and _pool is not None
    await _pool.execute(
        "INSERT INTO receipts (workflow_id, value, attempt, worker) VALUES ($1, $2, $3, $4)",
        ctx.workflow_id,
        json.dumps(value, sort_keys=True),
        ctx.attempt,
        ctx.worker_id,
    )
    return value


@workflow_step
async def hold(value: object) -> None:
    """Blocks on attempt 1 (until the worker is killed) when the message says ``hold``."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    if isinstance(value, dict) and value.get("hold") and ctx.attempt == 1:
        await record("hold")
        await anyio.sleep(3600)


@workflow
async def receive_and_keep(topic: str, timeout: float | None = None) -> object:
    """Receive one message on ``topic`` (``None`` after ``timeout``) and keep a receipt."""
    value = await recv(topic, timeout=timeout)
    await hold(value)
    return await keep_receipt(value)


@workflow_step
async def double_it(i: int, hang: bool) -> int:
    """A child's step; with ``hang`` it blocks on attempt 1 (until the worker is killed)."""
    await record("child")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if hang and ctx.attempt == 1:
        await record("hanging")
        await anyio.sleep(3600)
    return 2 * i


@workflow
async def child_double(i: int, hang: bool) -> int:
    return await double_it(i, hang)


@workflow
async def fan_out_sum(n: int, hang_child: int = -1) -> int:
    """Start ``n`` children from the body, then sum their outputs."""
    children = await start_workflows(child_double, [(i, i == hang_child) for i in range(n)])
    total = 0
    for child in children:
        total += await child.output()
    return total


# -- failure control (tests/worker/test_failure_control.py) ------------------------------------


async def runs_of(step: str) -> int:
    """How many times ``step`` has run in the current workflow (``step_runs`` rows)."""
    ctx = WorkflowContext.current()
    assert ctx is not None and _pool is not None
    return int(
        await _pool.fetchval(
            "SELECT count(*) FROM step_runs WHERE workflow_id = $1 AND step = $2",
            ctx.workflow_id,
            step,
        )
    )


class Flaky(Exception):
    pass


class CardDeclined(Exception):
    pass


@workflow_step(retry=RetryPolicy(max_attempts=4, initial_interval=0.1, backoff_coefficient=2))
async def flaky(fails: int) -> str:
    """Fails its first ``fails`` tries."""
    await record("flaky")
    tries = await runs_of("flaky")
    if tries <= fails:
        raise Flaky(f"try {tries} failed")
    return f"succeeded on try {tries}"


@workflow(max_attempts=3)
async def retried_step(fails: int) -> str:
    await first(0)
    return await flaky(fails)


@workflow_step(retry=RetryPolicy(max_attempts=5, initial_interval=0.05, give_up_on=(CardDeclined,)))
async def declined_card(order: str) -> str:
    await record("declined_card")
    raise CardDeclined(f"card declined for {order}")


@workflow_step(
    retry=RetryPolicy(max_attempts=5, initial_interval=0.05, retry_on=(ConnectionError,))
)
async def not_a_connection_error(order: str) -> str:
    await record("not_a_connection_error")
    raise ValueError(f"bad order {order}")


@workflow_step(retry=RetryPolicy(max_attempts=5, initial_interval=0.05))
async def refused(order: str) -> str:
    await record("refused")
    raise NonRetryableError(f"order {order} refused")


@workflow_step
async def refused_without_policy(order: str) -> str:
    await record("refused_without_policy")
    raise NonRetryableError(f"order {order} refused, no policy")


GIVES_UP = {
    "give_up_on": declined_card,
    "retry_on": not_a_connection_error,
    "non_retryable": refused,
    "non_retryable_no_policy": refused_without_policy,
}


@workflow(max_attempts=3)
async def gives_up(kind: str) -> str:
    """Its step's failure is not retried, by the step's policy nor by the workflow's budget."""
    return await GIVES_UP[kind](kind)


@workflow_step
async def flaky_body_step(fails: int) -> str:
    await record("flaky_body_step")
    tries = await runs_of("flaky_body_step")
    if tries <= fails:
        raise Flaky(f"attempt {tries} failed")
    return f"succeeded on attempt {tries}"


@workflow(retry=RetryPolicy(max_attempts=3, initial_interval=0.3, backoff_coefficient=2))
async def retried_workflow(fails: int) -> str:
    return await flaky_body_step(fails)


@workflow_step(timeout=0.3)
async def stuck(key: str) -> str:
    await record("stuck")
    await anyio.sleep(3600)
    return "never"


@workflow_step(timeout=0.3, retry=RetryPolicy(max_attempts=2, initial_interval=0.05))
async def stuck_once(key: str) -> str:
    """Stuck on its first try; its retry returns at once."""
    await record("stuck_once")
    if await runs_of("stuck_once") == 1:
        await anyio.sleep(3600)
    return "second try"


@workflow_step(timeout=0.3)
def stuck_in_a_thread(key: str) -> str:
    time.sleep(3600)  # abandoned at the timeout; the test's end kills the worker
    return "late"


STUCK = {"async": stuck, "retried": stuck_once, "thread": stuck_in_a_thread}


@workflow(max_attempts=1)
async def times_out(kind: str) -> str:
    return await STUCK[kind](kind)


@workflow_step
async def long_step(seconds: float) -> str:
    """Sleeps ``seconds``; records how it ended (shielded, as the body may be cancelled)."""
    await record("long")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await record("long:cancelled")
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await record("long:finally")
    return "finished"


@workflow
async def cancellable(seconds: float) -> str:
    await first(0)
    await long_step(seconds)
    return str(await third(0))


@workflow
async def parent_of_cancellable(seconds: float) -> str:
    """Starts ``cancellable(seconds)`` as its child and waits for it (holding no slot)."""
    child = await start_workflow(cancellable, seconds)
    return str(await child.output())


HOOK_CALLS_DDL = """
CREATE TABLE IF NOT EXISTS hook_calls (
    workflow_id text NOT NULL,
    hook text NOT NULL,
    worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
"""One row per ``durable_workflow_cancelled`` or ``durable_lease_lost`` a worker fired."""


class HookRecorder:
    """Records cancels and lost leases in ``hook_calls`` (a worker started with
    ``TEST_RECORD_HOOKS=1`` registers it)."""

    def __init__(self) -> None:
        self._writes: set[asyncio.Task[object]] = set()

    def _write(self, hook: str, workflow_id: str, worker_id: str) -> None:
        assert _pool is not None
        write = asyncio.get_running_loop().create_task(
            _pool.execute(
                "INSERT INTO hook_calls (workflow_id, hook, worker) VALUES ($1, $2, $3)",
                workflow_id,
                hook,
                worker_id,
            )
        )
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    @hookimpl
    def durable_workflow_cancelled(self, attempt: AttemptEvent) -> None:
        self._write("durable_workflow_cancelled", attempt.workflow_id, attempt.worker_id)

    @hookimpl
    def durable_lease_lost(self, attempt: AttemptEvent) -> None:
        self._write("durable_lease_lost", attempt.workflow_id, attempt.worker_id)


if os.environ.get("TEST_RECORD_HOOKS"):
    register_observer(HookRecorder(), name="test-hook-recorder")


# -- one door: effects ordered after the steps they depend on ---------------------------------
# (tests/worker/test_one_door_processes.py)


@workflow_step
async def pick() -> str:
    """A value that differs on every run; on attempt 1 it returns only after a pause (the
    test locks the workflow's row meanwhile, so the flush carrying its end waits)."""
    await record("pick")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        await anyio.sleep(float(os.environ.get("TEST_PICK_PAUSE", "1.0")))
    return f"{ctx.attempt}-{uuid.uuid4().hex[:8]}"


@workflow
async def picked_child(value: str) -> str:
    return value


@workflow
async def pick_then_start() -> str:
    value = await pick()
    child = await start_workflow(picked_child, value)
    return str(await child.output())


@workflow
async def pick_then_send(target: str) -> str:
    value = await pick()
    await send(target, value, topic="picked")
    return value


@workflow
async def pick_then_event() -> str:
    value = await pick()
    await set_event("picked", value)
    return value


@workflow
async def pick_then_schedule() -> str:
    value = await pick()
    await DurableClient(current_store()).add_schedule(
        f"picked-{value}", picked_child, Schedule("0 0 1 1 *", args=(value,))
    )
    return value


ONE_DOOR: dict[str, Workflow[..., str]] = {
    "child": pick_then_start,
    "send": pick_then_send,
    "event": pick_then_event,
    "schedule": pick_then_schedule,
}


# -- concurrency inside a body (tests/worker/test_concurrent_processes.py) ---------------------


@workflow
async def gathered_steps(branches: int, steps: int, pause: float) -> list[int]:
    """``branches`` branches side by side, each ``steps`` paced steps."""

    async def branch(b: int) -> int:
        total = 0
        for s in range(steps):
            total += await paced_step(b * 100 + s, pause)
        return total

    return list(await asyncio.gather(*(branch(b) for b in range(branches))))


@workflow
async def beside_own_steps(steps: int, pause: float) -> list[int]:
    """A background task of paced steps (1000 + i) beside the body's own (i)."""

    async def background() -> int:
        return sum([await paced_step(1000 + i, pause) for i in range(steps)])

    task = asyncio.create_task(background())
    mine = sum([await paced_step(i, pause * 1.3) for i in range(steps)])
    return [mine, await task]


@workflow
async def spawned_in_a_loop(steps: int, pause: float) -> int:
    """Each paced step (i) of the body starts a branch running another (500 + i)."""
    done: list[int] = []

    async def handle(i: int) -> None:
        done.append(await paced_step(500 + i, pause * 2))

    async with anyio.create_task_group() as group:
        for i in range(steps):
            group.start_soon(handle, await paced_step(i, pause))
    return sum(done)


@workflow_step
async def napped(i: int) -> str:
    await record(f"nap{i}")
    return f"nap{i}"


@workflow
async def gathered_sleeps(seconds: list[float]) -> list[str]:
    """Sleeps side by side, each followed by a step."""

    async def nap(i: int, length: float) -> str:
        await sleep(length)
        return await napped(i)

    return list(await asyncio.gather(*(nap(i, s) for i, s in enumerate(seconds))))


@workflow
async def gathered_children(n: int, hang_child: int = -1) -> int:
    """Start ``n`` children, then join them all at once."""
    children = await start_workflows(child_double, [(i, i == hang_child) for i in range(n)])
    return sum(await asyncio.gather(*(child.output() for child in children)))


# -- nothing a body does ends the worker (tests/worker/test_body_isolation_processes.py) -------


@workflow
async def waits_in_a_task_group(seconds: float) -> str:
    """A sleep and a receive side by side in an anyio task group."""
    got: list[object] = []

    async def nap() -> None:
        await sleep(seconds)

    async def listen() -> None:
        got.append(await recv("go"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(nap)
        tg.start_soon(listen)
    return f"rested, got {got[0]}"


class BodyBug(Exception):
    pass


def _base_exception(kind: str) -> BaseException:
    if kind == "system_exit":
        return SystemExit(3)
    if kind == "keyboard_interrupt":
        return KeyboardInterrupt()
    if kind == "group":
        return BaseExceptionGroup("branches", [KeyboardInterrupt(), BodyBug("in a branch")])
    return asyncio.CancelledError()


@workflow(max_attempts=1)
async def raises_base_exception(kind: str) -> str:
    await first(0)
    raise _base_exception(kind)


@workflow_step
async def tick(i: int) -> int:
    await record(f"tick{i}")
    await anyio.sleep(0.1)
    return i


@workflow
async def catches_everything(rounds: int) -> int:
    """Keeps going whatever a step raises: only the body's cancellation stops it."""
    done = 0
    for i in range(rounds):
        try:
            await tick(i)
            done += 1
        except Exception:
            await record("swallowed")
    return done
