"""Retry policies, step timeouts and cancellation on a real worker process and PostgreSQL.

Every step body records each run in the ``step_runs`` side table (with the
database's clock), so the tests measure real tries and the gaps between them;
the worker registers ``app.HookRecorder`` (``TEST_RECORD_HOOKS=1``), which
records each ``durable_workflow_cancelled`` and ``durable_lease_lost`` it
fires in ``hook_calls``.
"""

from __future__ import annotations

import itertools
import json

import anyio
import asyncpg
import pytest

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually

pytestmark = pytest.mark.anyio  # marked at collection too, so parametrize keeps its ids

SAFETY = 120
"""How long before a test is called hung: never a measure of speed."""


@pytest.fixture
async def hook_calls(pg: PostgresStore, sql: asyncpg.Connection) -> asyncpg.Connection:
    """An empty ``hook_calls`` side table (see ``app.HookRecorder``)."""
    await sql.execute(app.HOOK_CALLS_DDL)
    await sql.execute("TRUNCATE hook_calls")
    return sql


@pytest.fixture
async def client(
    pg: PostgresStore, workers: Workers, hook_calls: asyncpg.Connection
) -> DurableClient:
    """A client, with one worker (concurrency 4) running and warmed up.

    Its leases last an hour (renewed every half hour): what a test sees stop within its
    time was stopped by a notification, not found out at a lease renewal."""
    workers.start(WORKFLOW_CONCURRENCY=4, TEST_RECORD_HOOKS=1, WORKFLOW_LOCK_TIMEOUT_SECS=3600)
    client = DurableClient(pg)
    warmup = await client.start_workflow(app.instant)
    assert await warmup.wait_with_timeout(SAFETY) is WorkflowStatus.SUCCEEDED
    return client


async def run_times(sql: asyncpg.Connection, workflow_id: str, step: str) -> list[float]:
    """When each run of ``step`` began (database clock, epoch seconds), in order."""
    rows = await sql.fetch(
        "SELECT extract(epoch FROM at) AS at FROM step_runs "
        "WHERE workflow_id = $1 AND step = $2 ORDER BY at",
        workflow_id,
        step,
    )
    return [float(row["at"]) for row in rows]


async def step_row_running(sql: asyncpg.Connection, workflow_id: str, step_name: str) -> bool:
    """Whether the step's ``running`` row is written (a worker writes it once the step has
    run ``WORKFLOW_STEP_ROW_AFTER_MS``; a step cancelled sooner leaves no row)."""
    status = await sql.fetchval(
        "SELECT status FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2",
        workflow_id,
        step_name,
    )
    return bool(status == "running")


async def step_rows(sql: asyncpg.Connection, workflow_id: str) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await sql.fetch(
        "SELECT step_index, step_name, status, attempts, error FROM workflow_steps "
        "WHERE workflow_id = $1 ORDER BY step_index",
        workflow_id,
    )
    return rows


async def test_a_step_is_retried_with_exponential_backoff_within_one_attempt(
    client: DurableClient, sql: asyncpg.Connection
) -> None:
    handle = await client.start_workflow(app.retried_step, 3)
    assert await handle.wait_with_timeout(SAFETY) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "succeeded on try 4"

    assert len(await run_times(sql, handle.id, "first")) == 1, "the earlier step ran once"
    tries = await run_times(sql, handle.id, "flaky")
    gaps = [later - earlier for earlier, later in itertools.pairwise(tries)]
    assert len(gaps) == 3
    for gap, planned in zip(gaps, (0.1, 0.2, 0.4), strict=True):
        assert planned - 0.01 <= gap <= planned + 0.3, f"gaps {gaps}, planned 0.1/0.2/0.4"

    rows = await step_rows(sql, handle.id)
    assert [(r["step_name"], r["status"], r["attempts"]) for r in rows] == [
        (app.first.name, "succeeded", 1),
        (app.flaky.name, "succeeded", 4),
    ]
    assert rows[1]["error"] is None, "a step retried to success keeps no error"
    info = await handle.info()
    assert (info.attempts, info.max_attempts, info.error) == (1, 3, None)


NOT_RETRIED = {
    "give_up_on": ("tests.worker.app.CardDeclined", "card declined for give_up_on"),
    "retry_on": ("builtins.ValueError", "bad order retry_on"),
    "non_retryable": ("durable_core.errors.NonRetryableError", "order non_retryable refused"),
    "non_retryable_no_policy": (
        "durable_core.errors.NonRetryableError",
        "order non_retryable_no_policy refused, no policy",
    ),
}
"""The error each kind of ``app.gives_up`` records: its type and message."""


@pytest.mark.parametrize("kind", NOT_RETRIED)
async def test_an_error_the_policy_does_not_retry_fails_the_workflow_after_one_try(
    client: DurableClient, sql: asyncpg.Connection, kind: str
) -> None:
    error_type, message = NOT_RETRIED[kind]
    handle = await client.start_workflow(app.gives_up, kind)
    assert await handle.wait_with_timeout(SAFETY) is WorkflowStatus.FAILED
    step = app.GIVES_UP[kind]
    assert len(await run_times(sql, handle.id, step.name.rsplit(".", 1)[1])) == 1, "one try"

    row = await sql.fetchrow(
        "SELECT attempts, max_attempts, error FROM workflows WHERE id = $1", handle.id
    )
    assert (row["attempts"], row["max_attempts"]) == (1, 3), "no workflow retry either"
    error = json.loads(row["error"])
    assert (error["type"], error["message"]) == (error_type, message)
    assert (error["step_index"], error["step_name"]) == (0, step.name)
    assert f"{error_type.rsplit('.', 1)[1]}: {message}" in error["traceback"]

    [step_row] = await step_rows(sql, handle.id)
    assert (step_row["status"], step_row["attempts"]) == ("failed", 1)
    assert json.loads(step_row["error"])["message"] == message
    assert await handle.error() == error


async def test_a_workflow_policy_spaces_its_attempts_exponentially(
    client: DurableClient, sql: asyncpg.Connection
) -> None:
    handle = await client.start_workflow(app.retried_workflow, 2)
    assert await handle.wait_with_timeout(SAFETY) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "succeeded on attempt 3"
    runs = await sql.fetch(
        "SELECT attempt, extract(epoch FROM at) AS at FROM step_runs "
        "WHERE workflow_id = $1 ORDER BY at",
        handle.id,
    )
    assert [r["attempt"] for r in runs] == [1, 2, 3]
    gaps = [float(b["at"] - a["at"]) for a, b in itertools.pairwise(runs)]
    for gap, planned in zip(gaps, (0.3, 0.6), strict=True):
        # The next attempt is claimed no earlier than its run_at.
        assert gap >= planned - 0.01, f"gaps {gaps}, planned 0.3/0.6"
    info = await handle.info()
    assert (info.attempts, info.max_attempts) == (3, 3)


@pytest.mark.parametrize("kind", ["async", "thread", "retried"])
async def test_a_step_timeout_stops_a_stuck_step(
    client: DurableClient, sql: asyncpg.Connection, kind: str
) -> None:
    # Each stuck try lasts an hour: only the step's timeout (0.3 s) can end it.
    handle = await client.start_workflow(app.times_out, kind)
    status = await handle.wait_with_timeout(SAFETY)
    [step] = await step_rows(sql, handle.id)
    if kind == "retried":
        assert status is WorkflowStatus.SUCCEEDED
        assert await handle.output() == "second try"
        assert len(await run_times(sql, handle.id, "stuck_once")) == 2
        assert (step["status"], step["attempts"]) == ("succeeded", 2)
        return
    assert status is WorkflowStatus.FAILED
    assert (step["status"], step["attempts"]) == ("failed", 1)
    error = await handle.error()
    assert error is not None
    assert error["type"] == "durable_core.errors.StepTimeoutError"
    assert "ran longer than its timeout of 0.3s" in error["message"]
    assert (await handle.info()).attempts == 1


async def test_cancel_stops_a_running_step_at_once(
    client: DurableClient, sql: asyncpg.Connection, workers: Workers
) -> None:
    handle = await client.start_workflow(app.cancellable, 60.0)

    async def in_long_step() -> bool:
        return len(await run_times(sql, handle.id, "long")) == 1 and await step_row_running(
            sql, handle.id, app.long_step.name
        )

    await eventually(in_long_step, timeout=SAFETY, what="the workflow to enter its 60 s step")
    await handle.cancel()

    async def step_stopped() -> bool:
        return len(await run_times(sql, handle.id, "long:cancelled")) == 1

    # Stopped by the cancel's notification: the 60 s step and the hour's lease run on.
    await eventually(step_stopped, timeout=SAFETY, what="the step to see its cancellation")

    assert await handle.status() is WorkflowStatus.CANCELLED
    rows = await step_rows(sql, handle.id)
    assert [(r["step_name"], r["status"]) for r in rows] == [
        (app.first.name, "succeeded"),
        (app.long_step.name, "cancelled"),
    ]
    assert rows[1]["error"] is None

    # The worker is free again (a workflow started now runs), and nothing more ran.
    after = await client.start_workflow(app.instant)
    assert await after.wait_with_timeout(SAFETY) is WorkflowStatus.SUCCEEDED

    async def hook_fired() -> bool:
        return bool(await sql.fetchval("SELECT count(*) FROM hook_calls"))

    await eventually(hook_fired, timeout=SAFETY, what="the cancelled hook to be recorded")
    await anyio.sleep(0.2)  # room for a second call, were there one
    steps_run = await sql.fetch(
        "SELECT step FROM step_runs WHERE workflow_id = $1 ORDER BY at", handle.id
    )
    assert [r["step"] for r in steps_run] == ["first", "long", "long:cancelled", "long:finally"]
    hooks = await sql.fetch("SELECT workflow_id, hook FROM hook_calls")
    assert [(r["workflow_id"], r["hook"]) for r in hooks] == [
        (handle.id, "durable_workflow_cancelled")
    ]
    [proc] = workers.procs
    log = workers.log(proc)
    assert f"workflow {app.cancellable.name} cancelled; its body was stopped" in log
    assert f"workflow_id={handle.id} attempts=1 max_attempts=3 outcome=cancelled" in log
    assert "lost the lease" not in log
    assert "outcome=lease_lost" not in log


async def test_cancelling_a_parent_stops_its_running_child_and_ends_waiting_and_pending_ones(
    client: DurableClient, sql: asyncpg.Connection, workers: Workers
) -> None:
    parent = await client.start_workflow(app.parent_of_cancellable, 60.0)
    sleeper = await client.start_workflow(app.sleeper, 60.0)
    later = await client.start_workflow_later(60.0, app.instant)

    async def child_in_long_step() -> bool:
        child = await sql.fetchval("SELECT workflow_id FROM step_runs WHERE step = 'long'")
        return child is not None and await step_row_running(sql, child, app.long_step.name)

    await eventually(child_in_long_step, timeout=SAFETY, what="the child to enter its 60 s step")
    await eventually(
        lambda: sleeper_waits(sql, sleeper.id), timeout=SAFETY, what="the sleeper to suspend"
    )
    child_id = await sql.fetchval("SELECT id FROM workflows WHERE parent_id = $1", parent.id)
    assert (await parent.info()).waiting_for == f"child:{child_id}"

    await client.cancel(parent.id)
    await client.cancel(sleeper.id)
    await client.cancel(later.id)

    async def child_stopped() -> bool:
        return len(await run_times(sql, child_id, "long:cancelled")) == 1

    await eventually(child_stopped, timeout=SAFETY, what="the child's step to be stopped")
    statuses = await sql.fetch(
        "SELECT id, status, attempts FROM workflows WHERE id = any($1)",
        [parent.id, child_id, sleeper.id, later.id],
    )
    assert {r["id"]: (r["status"], r["attempts"]) for r in statuses} == {
        parent.id: ("cancelled", 0),  # it waited for its child: no attempt was running
        child_id: ("cancelled", 1),
        sleeper.id: ("cancelled", 0),
        later.id: ("cancelled", 0),
    }
    steps = await sql.fetch(
        "SELECT workflow_id, step_name, status FROM workflow_steps WHERE workflow_id = any($1) "
        "ORDER BY workflow_id, step_index",
        [parent.id, child_id, sleeper.id, later.id],
    )
    assert {(r["workflow_id"], r["step_name"], r["status"]) for r in steps} == {
        (parent.id, "durable.start", "succeeded"),
        (parent.id, "durable.wait", "cancelled"),
        (child_id, app.first.name, "succeeded"),
        (child_id, app.long_step.name, "cancelled"),
        (sleeper.id, "durable.sleep", "cancelled"),
    }

    # Nothing runs again: a workflow started now runs, and nothing of the cancelled ones.
    after = await client.start_workflow(app.instant)
    assert await after.wait_with_timeout(SAFETY) is WorkflowStatus.SUCCEEDED

    async def hook_fired() -> bool:
        return bool(await sql.fetchval("SELECT count(*) FROM hook_calls"))

    await eventually(hook_fired, timeout=SAFETY, what="the cancelled hook to be recorded")
    await anyio.sleep(0.2)  # room for a second call, were there one
    ran = await sql.fetch(
        "SELECT workflow_id, step FROM step_runs WHERE workflow_id = any($1) ORDER BY at",
        [parent.id, child_id, sleeper.id, later.id],
    )
    assert [(r["workflow_id"], r["step"]) for r in ran] == [
        (child_id, "first"),
        (child_id, "long"),
        (child_id, "long:cancelled"),
        (child_id, "long:finally"),
    ]
    hooks = await sql.fetch("SELECT workflow_id, hook FROM hook_calls")
    assert [(r["workflow_id"], r["hook"]) for r in hooks] == [
        (child_id, "durable_workflow_cancelled")
    ], "only the running child had a body to stop"
    log = workers.log(workers.procs[0])
    assert log.count("cancelled; its body was stopped") == 1
    assert "lost the lease" not in log


async def sleeper_waits(sql: asyncpg.Connection, workflow_id: str) -> bool:
    status = await sql.fetchval("SELECT status FROM workflows WHERE id = $1", workflow_id)
    return bool(status == "waiting")


async def test_a_workflow_timeout_ends_it_running_or_sleeping(
    client: DurableClient, sql: asyncpg.Connection
) -> None:
    timed = client.with_options(timeout=1.0)
    # An hour's work each: each can end only at its deadline.
    running = await timed.start_workflow(app.cancellable, 3600.0)
    sleeping = await timed.start_workflow(app.sleeper, 3600.0)
    for handle in (running, sleeping):
        assert await handle.wait_with_timeout(SAFETY) is WorkflowStatus.CANCELLED
    for handle in (running, sleeping):
        error = await handle.error()
        assert error is not None and error["type"].endswith("WorkflowTimeoutError")
        assert [a.outcome for a in await handle.attempts()] == ["timed_out"]
    rows = await step_rows(sql, running.id)
    assert [(r["step_name"], r["status"]) for r in rows] == [
        (app.first.name, "succeeded"),
        (app.long_step.name, "cancelled"),
    ]
    assert [r["status"] for r in await step_rows(sql, sleeping.id)] == ["cancelled"]


async def test_a_crashed_attempt_stays_in_the_history(
    pg: PostgresStore, sql: asyncpg.Connection, workers: Workers
) -> None:
    first = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2)
    handle = await DurableClient(pg).start_workflow(app.cancellable, 2.0)

    async def in_long_step() -> bool:
        return len(await run_times(sql, handle.id, "long")) == 1 and await step_row_running(
            sql, handle.id, app.long_step.name
        )

    await eventually(in_long_step, timeout=SAFETY, what="the workflow to enter its long step")
    crashed_worker = await sql.fetchval("SELECT locked_by FROM workflows WHERE id = $1", handle.id)
    first.kill()
    first.wait()
    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2)
    assert await handle.wait_with_timeout(SAFETY) is WorkflowStatus.SUCCEEDED
    history = await handle.attempts()
    assert [(a.attempt, a.outcome) for a in history] == [(1, "crashed"), (2, "succeeded")]
    assert history[0].worker == crashed_worker != history[1].worker
    assert history[0].error is not None and "stopped renewing its lease" in history[0].error
