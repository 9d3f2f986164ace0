"""Engine behaviours of the reference (seed/workflows.md), on real SQLite files.

Every workflow and step is defined at module level (the executor finds workflows
by ``module.qualname`` in the global registry) and each test has its own. Side
effects are counted in a table of a separate SQLite file, so a count is what
really ran, not what a Python object remembers.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from durable_core import (
    DurableClient,
    InvalidStateError,
    SerializationError,
    StepStatus,
    WorkflowConfig,
    WorkflowContext,
    WorkflowFailedError,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.codec.failures import load_error
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore
from tests.side_effects import effect, effect_count

THIS = sys.modules[__name__]
FAST = WorkflowConfig(retry_backoff_secs=0)

# -- helpers: side effects in a real table, raw SQL on the store's file -------------------


def db_path(store: SQLiteStore) -> str:
    database = store.engine.url.database
    assert database and Path(database).is_file(), "tests run on a real SQLite file"
    return database


def query(store: SQLiteStore, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Raw SQL on the store's file through a separate connection."""
    conn = sqlite3.connect(db_path(store), timeout=5, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def step_rows(store: SQLiteStore, workflow_id: str) -> list[tuple[Any, ...]]:
    """Every column of every step row of a workflow, as stored."""
    return query(
        store,
        "SELECT step_index, step_name, status, input, output, error, attempts, started_at, "
        "completed_at FROM workflow_steps WHERE workflow_id = ? ORDER BY step_index",
        (workflow_id,),
    )


def workflow_row(store: SQLiteStore, workflow_id: str) -> tuple[Any, ...]:
    rows = query(store, "SELECT * FROM workflows WHERE id = ?", (workflow_id,))
    assert len(rows) == 1
    return rows[0]


def status_summary(steps: list[Any]) -> list[tuple[int, str, str, int]]:
    return [(s.step_index, s.step_name, s.status.value, s.attempts) for s in steps]


@pytest.fixture(autouse=True)
def _no_env_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # The attempt budget written at enqueue reads WORKFLOW_MAX_ATTEMPTS; keep it default.
    monkeypatch.delenv("WORKFLOW_MAX_ATTEMPTS", raising=False)


# -- a failure at step 3 resumes at step 3 ---------------------------------------------------


@workflow_step
async def resume_fetch(user_id: int) -> str:
    effect("resume.fetch")
    return f"user:{user_id}"


@workflow_step
async def resume_enrich(user: str) -> dict[str, str]:
    effect("resume.enrich")
    return {"user": user, "tier": "gold"}


@workflow_step
async def resume_send(profile: dict[str, str]) -> str:
    effect("resume.send")
    if effect_count("resume.send") == 1:
        raise ConnectionError("mail server down")
    return f"sent to {profile['user']} ({profile['tier']})"


@workflow
async def resume_flow(user_id: int) -> str:
    effect("resume.body")
    user = await resume_fetch(user_id)
    profile = await resume_enrich(user)
    return await resume_send(profile)


async def test_failure_at_step_three_resumes_at_step_three(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(resume_flow, 7)

    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    info = await handle.info()
    assert info.attempts == 1 and info.locked_by is None and info.locked_until is None
    error = load_error(info.error)
    assert error is not None
    assert error["type"] == "builtins.ConnectionError"
    assert error["message"] == "mail server down"
    assert (error["step_index"], error["step_name"]) == (2, resume_send.name)
    steps = await handle.steps()
    assert status_summary(steps) == [
        (0, resume_fetch.name, "succeeded", 1),
        (1, resume_enrich.name, "succeeded", 1),
        (2, resume_send.name, "failed", 1),
    ]
    assert steps[2].output is None and "mail server down" in (steps[2].error or "")
    first_two = step_rows(sqlite_store, handle.id)[:2]

    assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED
    # Steps 1 and 2 replayed from cache; step 3 ran again; the body ran twice.
    assert effects("resume.fetch") == 1
    assert effects("resume.enrich") == 1
    assert effects("resume.send") == 2
    assert effects("resume.body") == 2

    info = await handle.info()
    assert info.status is WorkflowStatus.SUCCEEDED
    assert info.attempts == 2
    assert info.error is None
    assert info.completed_at is not None and info.locked_by is None
    assert await handle.output() == "sent to user:7 (gold)"
    steps = await handle.steps()
    assert status_summary(steps) == [
        (0, resume_fetch.name, "succeeded", 1),
        (1, resume_enrich.name, "succeeded", 1),
        (2, resume_send.name, "succeeded", 2),
    ]
    assert steps[2].error is None and steps[2].output == '"sent to user:7 (gold)"'
    # The cached rows were not rewritten at all (times included).
    assert step_rows(sqlite_store, handle.id)[:2] == first_two


# -- a failed workflow retried by an operator resumes from its cache ------------------------


@workflow_step
async def manual_retry_prepare() -> int:
    effect("manual.prepare")
    return 41


@workflow_step
async def manual_retry_finish(value: int) -> int:
    effect("manual.finish")
    if effect_count("manual.finish") == 1:
        raise RuntimeError("not yet")
    return value + 1


@workflow(max_attempts=1)
async def manual_retry_flow() -> int:
    return await manual_retry_finish(await manual_retry_prepare())


async def test_retry_of_failed_workflow_resumes_from_cache(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(manual_retry_flow)
    assert await runner.run_once(handle) is WorkflowStatus.FAILED

    await sqlite_store.retry_workflow(handle.id)
    info = await handle.info()
    assert (info.status, info.attempts, info.completed_at) == (WorkflowStatus.PENDING, 0, None)

    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 42
    assert (effects("manual.prepare"), effects("manual.finish")) == (1, 2)


# -- step caching: succeeded replays, running reruns (crash + lease expiry) -----------------

STUCK: dict[str, anyio.Event] = {}


async def die_when_stuck(runner: WorkflowRunner, workflow_id: str, tag: str) -> None:
    """Run one attempt until its step is stuck at ``tag``, then tear the attempt down, as
    a worker dying there would: nothing settles the row."""
    STUCK[tag] = anyio.Event()
    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            group.start_soon(runner.run_once, workflow_id)
            await STUCK[tag].wait()
            group.cancel_scope.cancel()


def expire_lease(store: SQLiteStore, workflow_id: str) -> None:
    """The lease runs out (time travel instead of waiting for it)."""
    query(
        store,
        "UPDATE workflows SET locked_until = ? WHERE id = ?",
        (
            (datetime.now(UTC) - timedelta(seconds=1)).replace(tzinfo=None).isoformat(" "),
            workflow_id,
        ),
    )


@workflow_step
async def crash_first() -> str:
    effect("crash.first")
    return "first"


@workflow_step
async def crash_second(value: str) -> str:
    effect("crash.second")
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        STUCK["crash"].set()
        await anyio.sleep_forever()  # the worker "dies" here
    return value + "+second"


@workflow
async def crash_flow() -> str:
    effect("crash.body")
    return await crash_second(await crash_first())


async def test_running_step_reruns_after_crash_and_lease_expiry(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    config = WorkflowConfig(lock_timeout_secs=30, retry_backoff_secs=0)
    handle = await DurableClient(sqlite_store).start_workflow(crash_flow)

    # A worker that dies mid-step: its task is torn down, nothing settles the row.
    await die_when_stuck(
        WorkflowRunner(sqlite_store, config, worker_id="doomed"), handle.id, "crash"
    )
    info = await handle.info()
    assert info.status is WorkflowStatus.RUNNING and info.attempts == 1
    assert info.locked_by == "doomed"
    assert status_summary(await handle.steps()) == [
        (0, crash_first.name, "succeeded", 1),
        (1, crash_second.name, "running", 1),
    ]

    # While the lease lasts nobody else may take it.
    survivor = WorkflowRunner(sqlite_store, config, worker_id="survivor")
    with pytest.raises(InvalidStateError, match="running"):
        await survivor.run_once(handle)

    assert info.locked_until is not None
    expire_lease(sqlite_store, handle.id)
    assert await survivor.run_once(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "first+second"
    info = await handle.info()
    assert info.attempts == 2 and info.locked_by is None
    # The succeeded step returned its cache; the running one ran again.
    assert effects("crash.first") == 1
    assert effects("crash.second") == 2
    assert effects("crash.body") == 2
    assert status_summary(await handle.steps()) == [
        (0, crash_first.name, "succeeded", 1),
        (1, crash_second.name, "succeeded", 2),
    ]


# -- determinism: input mismatch -------------------------------------------------------------

GREETING = "hello"


@workflow_step
async def det_input_greet(greeting: str, name: str) -> str:
    effect("det_input.greet")
    return f"{greeting}, {name}"


@workflow_step
async def det_input_flaky() -> None:
    effect("det_input.flaky")
    raise RuntimeError("transient failure")


@workflow
async def det_input_flow(name: str) -> str:
    text = await det_input_greet(GREETING, name)  # input depends on a module global
    await det_input_flaky()
    return text


async def test_replay_with_different_step_input_fails_with_input_mismatch(
    sqlite_store: SQLiteStore, effects: Callable[[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(det_input_flow, "ada")
    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    history = step_rows(sqlite_store, handle.id)
    assert [row[2] for row in history] == ["succeeded", "failed"]

    monkeypatch.setattr(THIS, "GREETING", "bonjour")
    # Non-retryable: the row fails at once although attempts remain.
    assert await runner.run_once(handle) is WorkflowStatus.FAILED
    info = await handle.info()
    assert info.attempts == 2 < info.max_attempts
    error = load_error(info.error)
    assert error is not None
    assert error["type"] == "durable_core.errors.StepInputMismatchError"
    assert det_input_greet.name in error["message"]
    assert "bonjour" in error["message"] and "hello" in error["message"]
    assert "index 0" in error["message"]
    assert "StepInputMismatchError" in error["traceback"]
    assert (error["step_index"], error["step_name"]) == (0, det_input_greet.name)
    with pytest.raises(WorkflowFailedError) as failed:
        await handle.output()
    assert failed.value.error["type"] == "durable_core.errors.StepInputMismatchError"

    # The cached history is untouched and no step body ran on the replay.
    assert step_rows(sqlite_store, handle.id) == history
    assert effects("det_input.greet") == 1
    assert effects("det_input.flaky") == 1


# -- determinism: step-name mismatch (a branch changed) --------------------------------------

BRANCH = "a"


@workflow_step
async def det_name_first() -> int:
    effect("det_name.first")
    return 1


@workflow_step
async def det_name_a(value: int) -> int:
    effect("det_name.a")
    return value + 10


@workflow_step
async def det_name_b(value: int) -> int:
    effect("det_name.b")
    return value + 20


@workflow_step
async def det_name_flaky() -> None:
    effect("det_name.flaky")
    raise RuntimeError("transient failure")


@workflow
async def det_name_flow() -> int:
    value = await det_name_first()
    if BRANCH == "a":  # branching outside a step: forbidden by the contract
        value = await det_name_a(value)
    else:
        value = await det_name_b(value)
    await det_name_flaky()
    return value


async def test_replay_with_different_branch_fails_with_step_name_mismatch(
    sqlite_store: SQLiteStore, effects: Callable[[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(det_name_flow)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    history = step_rows(sqlite_store, handle.id)
    assert [row[1] for row in history] == [
        det_name_first.name,
        det_name_a.name,
        det_name_flaky.name,
    ]

    monkeypatch.setattr(THIS, "BRANCH", "b")
    assert await runner.run_once(handle) is WorkflowStatus.FAILED
    info = await handle.info()
    assert info.attempts == 2 < info.max_attempts
    error = load_error(info.error)
    assert error is not None
    assert error["type"] == "durable_core.errors.StepNameMismatchError"
    assert det_name_a.name in error["message"] and det_name_b.name in error["message"]
    assert "index 1" in error["message"]
    assert (error["step_index"], error["step_name"]) == (1, det_name_b.name)

    assert step_rows(sqlite_store, handle.id) == history
    assert effects("det_name.first") == 1
    assert effects("det_name.a") == 1
    assert effects("det_name.b") == 0
    assert effects("det_name.flaky") == 1


INSERT_STEP = False


@workflow_step
async def det_insert_extra() -> int:
    effect("det_insert.extra")
    return 0


@workflow_step
async def det_insert_main() -> int:
    effect("det_insert.main")
    return 5


@workflow
async def det_insert_flow() -> int:
    if INSERT_STEP:  # a step inserted conditionally before the cached one
        await det_insert_extra()
    value = await det_insert_main()
    await det_name_flaky()
    return value


async def test_conditionally_inserted_step_fails_with_step_name_mismatch(
    sqlite_store: SQLiteStore, effects: Callable[[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(det_insert_flow)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    history = step_rows(sqlite_store, handle.id)

    monkeypatch.setattr(THIS, "INSERT_STEP", True)
    assert await runner.run_once(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.StepNameMismatchError"
    assert "index 0" in error["message"]
    assert step_rows(sqlite_store, handle.id) == history
    assert (effects("det_insert.extra"), effects("det_insert.main")) == (0, 1)


# -- a failed step may change its input on the rerun (no cached output to guard) ------------

FAILED_STEP_INPUT = 1


@workflow_step
async def rerun_input_step(value: int) -> int:
    effect("rerun_input.step")
    if value == 1:
        raise ValueError("bad value")
    return value


@workflow
async def rerun_input_flow() -> int:
    return await rerun_input_step(FAILED_STEP_INPUT)


async def test_failed_step_reruns_with_its_new_input(
    sqlite_store: SQLiteStore, effects: Callable[[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(rerun_input_flow)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    monkeypatch.setattr(THIS, "FAILED_STEP_INPUT", 2)
    assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 2
    (step,) = await handle.steps()
    assert (step.status, step.attempts, step.input) == (
        StepStatus.SUCCEEDED,
        2,
        '{"args":[2],"kwargs":{}}',
    )
    assert effects("rerun_input.step") == 2


# -- steps outside a workflow run inline; the context inside one -----------------------------


def _context_view() -> dict[str, Any]:
    ctx = WorkflowContext.current()
    return {
        "active": WorkflowContext.is_active(),
        "id": None if ctx is None else ctx.workflow_id,
        "name": None if ctx is None else ctx.workflow_name,
        "attempt": None if ctx is None else ctx.attempt,
    }


@workflow_step
async def ctx_probe_async(tag: str) -> dict[str, Any]:
    effect(f"ctx.async.{tag}")
    return {"tag": tag, **_context_view()}


@workflow_step
def ctx_probe_sync(tag: str) -> dict[str, Any]:
    # A plain `def` step runs in a worker thread; the context must follow it there.
    effect(f"ctx.sync.{tag}")
    return {"tag": tag, **_context_view()}


@workflow_step
async def ctx_outer_step() -> list[dict[str, Any]]:
    # A step called from a step body runs inline (one persisted step, not two).
    return [await ctx_probe_async("nested"), _context_view()]


@workflow
async def ctx_flow() -> dict[str, Any]:
    body_first = _context_view()
    a = await ctx_probe_async("a")
    s = await ctx_probe_sync("s")
    nested = await ctx_outer_step()
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        raise RuntimeError("fail the first attempt after the probes")
    late = await ctx_probe_async("late")
    return {"body": body_first, "async": a, "sync": s, "nested": nested, "late": late}


async def test_context_inside_workflow_body_and_steps(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(ctx_flow)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    out = await handle.output()

    def view(attempt: int) -> dict[str, Any]:
        return {"active": True, "id": handle.id, "name": ctx_flow.name, "attempt": attempt}

    assert out["body"] == view(2)
    # Cached from attempt 1, so they report what attempt 1 saw.
    assert out["async"] == {"tag": "a", **view(1)}
    assert out["sync"] == {"tag": "s", **view(1)}
    assert out["nested"] == [{"tag": "nested", **view(1)}, view(1)]
    assert out["late"] == {"tag": "late", **view(2)}
    assert WorkflowContext.current() is None and not WorkflowContext.is_active()
    assert [s.step_name for s in await handle.steps()] == [
        ctx_probe_async.name,
        ctx_probe_sync.name,
        ctx_outer_step.name,
        ctx_probe_async.name,
    ]
    assert effects("ctx.async.a") == 1 and effects("ctx.sync.s") == 1
    assert effects("ctx.async.nested") == 1


@workflow_step
async def inline_double(value: int) -> int:
    effect("inline.double")
    return value * 2


@workflow
async def inline_flow(value: int) -> int:
    return await inline_double(value) + 1


async def test_step_outside_a_workflow_runs_inline_without_rows(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    assert await ctx_probe_async("outside") == {
        "tag": "outside",
        "active": False,
        "id": None,
        "name": None,
        "attempt": None,
    }
    sync_view = await ctx_probe_sync("outside")
    assert sync_view["active"] is False and sync_view["id"] is None
    assert await inline_double(4) == 8
    assert await inline_double(4) == 8  # no caching: the body runs each time
    # Calling a workflow directly runs its body inline too.
    assert await inline_flow(5) == 11
    assert effects("inline.double") == 3
    assert effects("ctx.async.outside") == 1 and effects("ctx.sync.outside") == 1
    assert query(sqlite_store, "SELECT count(*) FROM workflows") == [(0,)]
    assert query(sqlite_store, "SELECT count(*) FROM workflow_steps") == [(0,)]


# -- faithful replay of typed step outputs ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str


TYPED_SEEN: list[list[tuple[type, Any]]] = []
TYPED_WHEN = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
TYPED_ID = uuid.UUID("6f1c2a9e-7b1d-4c53-9a3e-2f0c7d1b9e44")


@workflow_step
async def typed_when() -> datetime:
    effect("typed.when")
    return TYPED_WHEN


@workflow_step
async def typed_amount() -> Decimal:
    effect("typed.amount")
    return Decimal("12.50")


@workflow_step
async def typed_id() -> uuid.UUID:
    effect("typed.id")
    return TYPED_ID


@workflow_step
async def typed_pair() -> tuple[int, str, tuple[float, ...]]:
    effect("typed.pair")
    return (1, "two", (3.0, 4.5))


@workflow_step
async def typed_money() -> Money:
    effect("typed.money")
    return Money(Decimal("9.990"), "EUR")


@workflow
async def typed_flow() -> str:
    values = [
        await typed_when(),
        await typed_amount(),
        await typed_id(),
        await typed_pair(),
        await typed_money(),
    ]
    TYPED_SEEN.append([(type(v), v) for v in values])
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt == 1:
        raise RuntimeError("replay, please")
    return "done"


async def test_typed_step_outputs_replay_as_the_same_type(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    TYPED_SEEN.clear()
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(typed_flow)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert len(TYPED_SEEN) == 2
    first, replay = TYPED_SEEN
    assert [t for t, _ in first] == [datetime, Decimal, uuid.UUID, tuple, Money]
    assert [t for t, _ in replay] == [t for t, _ in first]
    assert [v for _, v in replay] == [v for _, v in first]
    when = replay[0][1]
    assert when.utcoffset() == timedelta(hours=2) and when == TYPED_WHEN
    assert str(replay[1][1]) == "12.50"  # the exponent survives, not just the value
    assert type(replay[3][1][2]) is tuple  # nested tuples stay tuples
    assert str(replay[4][1].amount) == "9.990"
    for tag in ("when", "amount", "id", "pair", "money"):
        assert effects(f"typed.{tag}") == 1, tag


class Opaque:
    """Not serializable: no way to store it as JSON and read it back."""


@workflow_step
async def unstorable_step() -> Any:
    effect("unstorable.step")
    return Opaque()


@workflow
async def unstorable_flow() -> None:
    await unstorable_step()


async def test_step_output_that_cannot_round_trip_fails_on_first_run(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(unstorable_flow)
    assert await runner.run_once(handle) is WorkflowStatus.FAILED  # non-retryable
    error = await handle.error()
    assert error is not None
    assert error["type"] == "durable_core.errors.SerializationError"
    assert "Opaque" in error["message"] and unstorable_step.name in error["message"]
    assert (error["step_index"], error["step_name"]) == (0, unstorable_step.name)
    (step,) = await handle.steps()
    assert step.status is StepStatus.FAILED and step.output is None
    assert effects("unstorable.step") == 1
    assert SerializationError.retryable is False


# -- retry budget and linear backoff ---------------------------------------------------------


@workflow_step
async def always_failing_step(n: int) -> None:
    effect("always.step")
    raise ValueError(f"boom {n}")


@workflow
async def always_failing_flow(n: int) -> None:
    effect("always.body")
    await always_failing_step(n)


def _assert_close(actual: datetime, low: datetime, high: datetime) -> None:
    slack = timedelta(milliseconds=50)
    assert low - slack <= actual <= high + slack, (actual, low, high)


async def test_retry_budget_and_linear_backoff(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    runner = WorkflowRunner(sqlite_store, WorkflowConfig(max_attempts=3, retry_backoff_secs=5))
    handle = await DurableClient(sqlite_store).start_workflow(always_failing_flow, 1)
    assert (await handle.info()).max_attempts == 3

    for attempt in (1, 2):
        before = datetime.now(UTC)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        after = datetime.now(UTC)
        info = await handle.info()
        assert info.attempts == attempt
        assert info.locked_by is None and info.locked_until is None and info.completed_at is None
        delay = timedelta(seconds=attempt * 5)
        _assert_close(info.run_at, before + delay, after + delay)
        error = load_error(info.error)
        assert error is not None and error["message"] == "boom 1"

        # Not due yet: a runner that honours run_at leaves it alone.
        raw = workflow_row(sqlite_store, handle.id)
        with pytest.raises(InvalidStateError, match="pending"):
            await runner.run_once(handle, due_only=True)
        assert await runner.drain(due_only=True) == 0
        assert workflow_row(sqlite_store, handle.id) == raw

    assert await runner.run_once(handle) is WorkflowStatus.FAILED
    info = await handle.info()
    assert info.attempts == 3 and info.completed_at is not None and info.locked_by is None
    error = load_error(info.error)
    assert error is not None
    assert error["type"] == "builtins.ValueError"
    assert error["message"] == "boom 1"
    assert (
        "always_failing_step" in error["traceback"] and "ValueError: boom 1" in error["traceback"]
    )
    assert (error["step_index"], error["step_name"]) == (0, always_failing_step.name)
    assert status_summary(await handle.steps()) == [(0, always_failing_step.name, "failed", 3)]
    assert effects("always.step") == 3 and effects("always.body") == 3

    with pytest.raises(InvalidStateError, match="failed"):
        await runner.run_once(handle)
    assert await runner.drain(due_only=False) == 0


async def test_due_retry_runs_once_its_backoff_has_passed(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    # A backoff no slow machine can outlast between two statements; the test clock passes it.
    runner = WorkflowRunner(sqlite_store, WorkflowConfig(retry_backoff_secs=60))
    handle = await DurableClient(sqlite_store).start_workflow(always_failing_flow, 2)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    assert await runner.drain(due_only=True) == 0
    runner.clock.advance(61)
    assert await runner.drain(due_only=True) == 1
    assert (await handle.info()).attempts == 2


@workflow(max_attempts=1)
async def one_shot_flow() -> None:
    effect("one_shot.body")
    raise RuntimeError("no second chance")


@workflow(max_attempts=5)
async def five_shot_flow() -> None:
    effect("five_shot.body")
    raise RuntimeError("again")


async def test_workflow_max_attempts_overrides_the_default_budget(
    sqlite_store: SQLiteStore, effects: Callable[[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    client = DurableClient(sqlite_store)
    one = await client.start_workflow(one_shot_flow)
    assert await runner.run_once(one) is WorkflowStatus.FAILED
    assert ((await one.info()).attempts, effects("one_shot.body")) == (1, 1)

    five = await client.start_workflow(five_shot_flow)
    assert (await five.info()).max_attempts == 5
    assert await runner.run_until_complete(five) is WorkflowStatus.FAILED
    assert ((await five.info()).attempts, effects("five_shot.body")) == (5, 5)

    # The client's budget and WORKFLOW_MAX_ATTEMPTS apply when the workflow sets none.
    two = await DurableClient(sqlite_store, max_attempts=2).start_workflow(always_failing_flow, 3)
    assert (await two.info()).max_attempts == 2
    assert await runner.run_until_complete(two) is WorkflowStatus.FAILED
    assert (await two.info()).attempts == 2
    monkeypatch.setenv("WORKFLOW_MAX_ATTEMPTS", "4")
    four = await client.start_workflow(always_failing_flow, 4)
    assert (await four.info()).max_attempts == 4
    # ... but the decorator still wins.
    assert (await client.start_workflow(one_shot_flow)).id
    rows = query(
        sqlite_store, "SELECT max_attempts FROM workflows WHERE name = ?", (one_shot_flow.name,)
    )
    assert rows == [(1,), (1,)]


# -- a bug in the body settles the row, never leaves it running ------------------------------


@workflow
async def buggy_division_flow(value: int) -> float:
    effect("bug.division")
    return value / 0


@workflow
async def buggy_attribute_flow(value: int) -> Any:
    effect("bug.attribute")
    return value.no_such_attribute  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("flow", "tag", "error_type"),
    [
        (buggy_division_flow, "bug.division", "builtins.ZeroDivisionError"),
        (buggy_attribute_flow, "bug.attribute", "builtins.AttributeError"),
    ],
)
async def test_bug_in_the_body_is_settled_not_left_running(
    sqlite_store: SQLiteStore,
    effects: Callable[[str], int],
    flow: Any,
    tag: str,
    error_type: str,
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(flow, 3)
    statuses = []
    for _ in range(3):
        statuses.append(await runner.run_once(handle))
        (raw_status,) = query(
            sqlite_store, "SELECT status FROM workflows WHERE id = ?", (handle.id,)
        )
        assert raw_status[0] != "running"
        assert (await handle.info()).locked_by is None
    assert statuses == [WorkflowStatus.PENDING, WorkflowStatus.PENDING, WorkflowStatus.FAILED]
    error = await handle.error()
    assert error is not None
    assert error["type"] == error_type
    assert error["step_index"] is None and error["step_name"] is None
    assert flow.fn.__name__ in error["traceback"]
    assert effects(tag) == 3


# -- crash recovery: reclaim past the budget, heartbeat, fencing -----------------------------


@workflow_step
async def reclaim_hang() -> None:
    effect("reclaim.hang")
    STUCK["reclaim"].set()
    await anyio.sleep_forever()


@workflow(max_attempts=1)
async def reclaim_budget_flow() -> None:
    effect("reclaim.body")
    await reclaim_hang()


async def test_reclaim_of_an_expired_lease_past_the_budget_fails_the_row(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(reclaim_budget_flow)
    await die_when_stuck(
        WorkflowRunner(sqlite_store, FAST, worker_id="doomed"), handle.id, "reclaim"
    )
    assert (await handle.info()).status is WorkflowStatus.RUNNING
    expire_lease(sqlite_store, handle.id)
    assert await WorkflowRunner(sqlite_store, FAST).run_once(handle) is WorkflowStatus.FAILED
    info = await handle.info()
    assert info.attempts == 2 and info.locked_by is None
    error = load_error(info.error)
    assert error is not None and "attempt budget of 1 is spent" in error["message"]
    assert effects("reclaim.body") == 1 and effects("reclaim.hang") == 1  # not run again


HEARTBEAT_RELEASE: list[anyio.Event] = []


@workflow_step
async def heartbeat_slow_step() -> str:
    effect("heartbeat.step")
    STUCK["heartbeat"].set()
    await HEARTBEAT_RELEASE[0].wait()  # until the test has seen the lease outlive its timeout
    return "slow"


@workflow
async def heartbeat_flow() -> str:
    return await heartbeat_slow_step()


async def test_heartbeat_keeps_the_lease_of_a_step_longer_than_the_lock_timeout(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    config = WorkflowConfig(lock_timeout_secs=1, retry_backoff_secs=0)
    handle = await DurableClient(sqlite_store).start_workflow(heartbeat_flow)
    STUCK["heartbeat"] = anyio.Event()
    HEARTBEAT_RELEASE[:] = [anyio.Event()]
    other = WorkflowRunner(sqlite_store, config, worker_id="thief")
    results: list[WorkflowStatus] = []

    async def run() -> None:
        results.append(
            await WorkflowRunner(sqlite_store, config, worker_id="owner").run_once(handle)
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(120):
            await STUCK["heartbeat"].wait()
        first = (await handle.info()).locked_until
        assert first is not None
        await anyio.sleep((first - datetime.now(UTC)).total_seconds() + 0.15)
        # Past the first lease's end: the heartbeat renewed it, so the step still holds it.
        info = await handle.info()
        assert info.status is WorkflowStatus.RUNNING and info.locked_by == "owner"
        assert info.locked_until is not None and info.locked_until > first
        with pytest.raises(InvalidStateError):
            await other.run_once(handle)
        HEARTBEAT_RELEASE[0].set()
    assert results == [WorkflowStatus.SUCCEEDED]
    info = await handle.info()
    assert info.attempts == 1 and info.locked_until is None
    assert effects("heartbeat.step") == 1


@workflow_step
async def fenced_cancel_self() -> str:
    effect("fenced.cancel")
    ctx = WorkflowContext.current()
    assert ctx is not None
    await ctx.store.cancel_workflow(ctx.workflow_id)  # an operator cancels it meanwhile
    return "cancelled myself"


@workflow_step
async def fenced_after() -> None:
    effect("fenced.after")


@workflow
async def fenced_flow() -> None:
    await fenced_cancel_self()
    await fenced_after()


async def test_a_worker_that_lost_its_lease_cannot_write(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(fenced_flow)
    assert await WorkflowRunner(sqlite_store, FAST).run_once(handle) is WorkflowStatus.CANCELLED
    info = await handle.info()
    assert info.status is WorkflowStatus.CANCELLED and info.output is None
    # The step that ran could not record its output (the cancel ended it); the next one
    # never started.
    (step,) = await handle.steps()
    assert step.status is StepStatus.CANCELLED and step.output is None
    assert (effects("fenced.cancel"), effects("fenced.after")) == (1, 0)
