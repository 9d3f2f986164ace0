"""Crash recovery by database session: real worker processes, SIGKILL and SIGSTOP.

Each worker holds a liveness lock on a PostgreSQL session of its own. A worker
killed outright loses that session at once, and another worker takes its
workflows over without waiting for their leases; a worker that is alive but
paused keeps its session, so its leases run their course, and its writes once it
resumes are refused (fenced). The figures (how long a takeover takes, before
and after) are ``python -m bench.recovery``'s.
"""

from __future__ import annotations

import signal
import subprocess

import asyncpg

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually

HANG_GUARD = 120
"""How long before a test is called hung: never a measure of speed."""


async def step_ran(sql: asyncpg.Connection, step: str, *, attempt: int = 1) -> None:
    """Wait until a worker has entered ``step`` in ``attempt`` (recorded in the side table)."""

    async def entered() -> bool:
        return bool(
            await sql.fetchval(
                "SELECT count(*) FROM step_runs WHERE step = $1 AND attempt = $2", step, attempt
            )
        )

    await eventually(entered, timeout=HANG_GUARD, what=f"a worker to enter {step} ({attempt})")


async def holds_a_session(
    sql: asyncpg.Connection, workers: Workers, proc: subprocess.Popen[bytes]
) -> None:
    """Wait until ``proc`` has started and its registry row names its liveness session."""

    async def registered() -> bool:
        if "started: concurrency" not in workers.log(proc):
            return False
        return bool(
            await sql.fetchval(
                "SELECT count(*) FROM workflow_workers WHERE pid = $1 AND session_key IS NOT NULL",
                proc.pid,
            )
        )

    await eventually(registered, timeout=HANG_GUARD, what=f"worker {proc.pid} to register")


async def test_a_killed_workers_workflow_is_taken_over_long_before_its_lease_runs_out(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.killed_mid_step, 10)
    victim = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=300, WORKFLOW_CONCURRENCY=1)
    await step_ran(sql, "hang")
    rescuer = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=300, WORKFLOW_CONCURRENCY=1)
    await holds_a_session(sql, workers, rescuer)
    lease_end = await sql.fetchval("SELECT locked_until FROM workflows WHERE id = $1", handle.id)

    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=HANG_GUARD)
    # With the lease alone this would take five minutes, more than the guard allows.
    assert await handle.wait_with_timeout(HANG_GUARD) is WorkflowStatus.SUCCEEDED

    runs = await sql.fetch(
        "SELECT step, attempt, worker, at FROM step_runs WHERE workflow_id = $1 ORDER BY at",
        handle.id,
    )
    assert [(r["step"], r["attempt"]) for r in runs] == [
        ("first", 1),
        ("hang", 1),
        ("hang", 2),
        ("third", 2),
    ], "the step that succeeded before the kill did not run again"
    assert runs[2]["worker"] != runs[1]["worker"], "another worker took it over"
    assert runs[2]["at"] < lease_end, "taken over while the dead worker's lease still ran"
    info = await handle.info()
    assert info.attempts == 2 and await handle.output() == 8
    assert "is dead (its database session ended)" in workers.log(rescuer)
    attempts = await handle.attempts()
    assert [a.outcome for a in attempts] == ["crashed", "succeeded"]
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(timeout=HANG_GUARD) == 0


async def test_a_paused_worker_keeps_its_lease_until_it_runs_out_and_is_then_fenced(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.whoami_flow, 2.0)
    paused = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=8, WORKFLOW_CONCURRENCY=1)
    await holds_a_session(sql, workers, paused)
    await step_ran(sql, "whoami")
    paused.send_signal(signal.SIGSTOP)
    try:
        owner = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=8, WORKFLOW_CONCURRENCY=1)
        await holds_a_session(sql, workers, owner)
        # Read once the paused worker can write no more (a renewal in flight has landed).
        lease_end = await sql.fetchval(
            "SELECT locked_until FROM workflows WHERE id = $1", handle.id
        )
        await step_ran(sql, "whoami", attempt=2)
    finally:
        paused.send_signal(signal.SIGCONT)
    taken_at = await sql.fetchval(
        "SELECT at FROM step_runs WHERE workflow_id = $1 AND attempt = 2", handle.id
    )
    assert taken_at >= lease_end, "the paused worker kept its lease until it ran out"
    assert "is dead" not in workers.log(owner), "a paused worker is not dead"

    assert await handle.wait_with_timeout(HANG_GUARD) is WorkflowStatus.SUCCEEDED
    runs = await sql.fetch("SELECT worker, attempt FROM step_runs ORDER BY at")
    paused_id, owner_id = runs[0]["worker"], runs[1]["worker"]
    assert [r["attempt"] for r in runs] == [1, 2] and paused_id != owner_id
    assert await handle.output() == owner_id, "the output is the new owner's, not the paused one's"
    step = await sql.fetchrow("SELECT status, output FROM workflow_steps")
    assert step["status"] == "succeeded" and owner_id in step["output"]

    async def refused() -> bool:
        return "lost the lease" in workers.log(paused)

    await eventually(refused, timeout=HANG_GUARD, what="the resumed worker's write to be refused")
    final = await handle.info()
    assert final.attempts == 2 and final.status is WorkflowStatus.SUCCEEDED
    paused.send_signal(signal.SIGTERM)
    owner.send_signal(signal.SIGTERM)
    assert paused.wait(timeout=HANG_GUARD) == 0 and owner.wait(timeout=HANG_GUARD) == 0
