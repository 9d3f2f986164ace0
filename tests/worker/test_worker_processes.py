"""Real worker processes against the real PostgreSQL: draining, crashes, signals.

Each test asserts on what the database holds afterwards: the workflow rows and
the ``step_runs`` side table in which every step body records each run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import anyio
import asyncpg

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually


async def step_ran(sql: asyncpg.Connection, step: str, *, what: str) -> None:
    """Wait until a worker has entered ``step`` (recorded in the side table)."""

    async def entered() -> bool:
        return bool(await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = $1", step))

    await eventually(entered, timeout=120, what=what)


async def status_counts(sql: asyncpg.Connection) -> dict[str, int]:
    rows = await sql.fetch("SELECT status, count(*) AS n FROM workflows GROUP BY status")
    return {row["status"]: row["n"] for row in rows}


async def test_two_workers_drain_500_three_step_workflows_exactly_once(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    handles = await client.start_workflows(app.three_steps, [(n,) for n in range(500)])
    first = workers.start(WORKFLOW_CONCURRENCY=4)
    second = workers.start(WORKFLOW_CONCURRENCY=4)

    async def drained() -> bool:
        return (await status_counts(sql)).get("succeeded", 0) == 500

    await eventually(drained, timeout=120, what="500 workflows to succeed")

    runs = await sql.fetch(
        "SELECT workflow_id, step, count(*) AS n FROM step_runs GROUP BY workflow_id, step"
    )
    assert len(runs) == 1500
    assert {row["n"] for row in runs} == {1}
    assert {row["step"] for row in runs} == {"first", "second", "third"}
    attempts = await sql.fetch("SELECT DISTINCT attempts FROM workflows")
    assert [row["attempts"] for row in attempts] == [1]
    workers_used = await sql.fetch("SELECT DISTINCT worker FROM step_runs")
    assert len(workers_used) == 2, "both worker processes took a share of the work"
    outputs = {h.id: await h.output() for h in handles[:10]}
    assert list(outputs.values()) == [(n + 1) * 2 - 3 for n in range(10)]
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0


async def test_sigkill_mid_step_is_reclaimed_after_the_lease_and_resumes(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    # Without liveness sessions (a store that cannot hold one) the lease alone tells: the
    # takeover at once when one is held is test_recovery_processes.py's.
    separator = "&" if "?" in workers.url else "?"
    workers.url = f"{workers.url}{separator}durable_liveness=off"
    handle = await DurableClient(pg).start_workflow(app.killed_mid_step, 10)
    victim = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)

    await step_ran(sql, "hang", what="the worker to enter the hanging step")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=120)
    row = await sql.fetchrow("SELECT status, attempts FROM workflows WHERE id = $1", handle.id)
    assert (row["status"], row["attempts"]) == ("running", 1)

    killed_at = time.monotonic()
    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)
    assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    assert time.monotonic() - killed_at >= 1.0, "reclaimed only once the lease had expired"

    record = await handle.info()
    assert record.attempts == 2
    assert await handle.output() == 8
    runs = await sql.fetch(
        "SELECT step, attempt FROM step_runs WHERE workflow_id = $1 ORDER BY at", handle.id
    )
    assert [(r["step"], r["attempt"]) for r in runs] == [
        ("first", 1),
        ("hang", 1),
        ("hang", 2),
        ("third", 2),
    ], "the step that succeeded before the kill did not run again"


async def test_heartbeat_keeps_a_step_longer_than_the_lock_timeout(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.slow_flow, 5.0)
    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)
    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)
    assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    record = await handle.info()
    assert record.attempts == 1, "never reclaimed while its heartbeat lived"
    assert await sql.fetchval("SELECT count(*) FROM step_runs") == 1
    assert record.locked_until is None and record.locked_by is None

    settled = await sql.fetchrow("SELECT updated_at, locked_until FROM workflows")
    await anyio.sleep(2.5)
    later = await sql.fetchrow("SELECT updated_at, locked_until FROM workflows")
    assert later == settled, "no lease renewal after the workflow settled"


async def test_sigterm_stops_claiming_and_finishes_in_flight_work(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    in_flight = await client.start_workflows(app.slow_flow, [(2.0,)] * 3)
    proc = workers.start(WORKFLOW_CONCURRENCY=3)

    async def all_running() -> bool:
        return (await status_counts(sql)).get("running", 0) == 3

    await eventually(all_running, timeout=120, what="three workflows running")
    proc.send_signal(signal.SIGTERM)
    await anyio.sleep(0.2)
    late = await client.start_workflows(app.instant, [()] * 3)
    assert proc.wait(timeout=120) == 0
    for handle in in_flight:
        assert await handle.status() is WorkflowStatus.SUCCEEDED
    for waiting in late:
        assert await waiting.status() is WorkflowStatus.PENDING
    assert "no new claims" in workers.log(proc)


async def test_notify_wakes_an_idle_worker_well_before_the_poll_interval(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    workers.start(WORKFLOW_POLL_INTERVAL_MS=1000, WORKFLOW_CONCURRENCY=1)
    client = DurableClient(pg)
    warmup = await client.start_workflow(app.instant)
    assert await warmup.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED

    latencies = []
    for _ in range(15):
        await anyio.sleep(0.05)
        handle = await client.start_workflow(app.instant)
        assert await handle.wait_with_timeout(10) is WorkflowStatus.SUCCEEDED
        latency = await sql.fetchval(
            "SELECT extract(epoch FROM s.at - w.created_at) FROM step_runs s "
            "JOIN workflows w ON w.id = s.workflow_id WHERE w.id = $1",
            handle.id,
        )
        latencies.append(float(latency))
    latencies.sort()
    median = latencies[len(latencies) // 2]
    assert median < 0.2, f"median enqueue-to-start {median:.3f}s; a poll alone averages 0.5s"


async def test_worker_on_a_store_without_claims_exits_non_zero(tmp_path: object) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_core",
            "worker",
            "--app",
            "tests.worker.app",
            "--database-url",
            f"sqlite:///{tmp_path}/x.db",
            "--migrate",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "cannot claim workflows: the worker needs PostgreSQL" in result.stderr


async def test_a_zombie_whose_lease_was_reclaimed_cannot_write_or_settle(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.whoami_flow, 3.0)
    zombie = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)

    await step_ran(sql, "whoami", what="the zombie to start its step")
    zombie.send_signal(signal.SIGSTOP)
    try:
        owner = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)

        async def reclaimed() -> bool:
            return bool(await sql.fetchval("SELECT attempts FROM workflows") == 2)

        await eventually(reclaimed, timeout=120, what="another worker to reclaim the lease")
    finally:
        zombie.send_signal(signal.SIGCONT)

    assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    runs = await sql.fetch("SELECT worker, attempt FROM step_runs ORDER BY at")
    zombie_id, owner_id = runs[0]["worker"], runs[1]["worker"]
    assert [r["attempt"] for r in runs] == [1, 2] and zombie_id != owner_id
    assert await handle.output() == owner_id, "the output is the new owner's, not the zombie's"
    step = await sql.fetchrow("SELECT status, output, attempts FROM workflow_steps")
    assert step["status"] == "succeeded" and owner_id in step["output"]

    async def zombie_noticed() -> bool:
        return "lost the lease" in workers.log(zombie)

    await eventually(zombie_noticed, timeout=120, what="the zombie to report its lost lease")
    final = await handle.info()
    assert final.attempts == 2 and final.status is WorkflowStatus.SUCCEEDED
    zombie.send_signal(signal.SIGTERM)
    owner.send_signal(signal.SIGTERM)
    assert zombie.wait(timeout=120) == 0 and owner.wait(timeout=120) == 0


async def test_a_second_signal_abandons_in_flight_work_to_be_reclaimed(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.killed_mid_step, 1)
    proc = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)

    await step_ran(sql, "hang", what="the worker to enter the hanging step")
    proc.send_signal(signal.SIGTERM)
    await anyio.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 1
    assert "abandoning 1 in-flight workflows" in workers.log(proc)
    assert await handle.status() is WorkflowStatus.RUNNING

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=1)
    assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    assert (await handle.info()).attempts == 2


async def test_the_sigterm_drain_ends_at_the_drain_timeout_leaving_the_rest_to_the_lease(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.never_ending)
    proc = workers.start("--drain-timeout", "0.5", WORKFLOW_CONCURRENCY=1)

    await step_ran(sql, "block", what="the worker to begin the step that never ends")
    proc.send_signal(signal.SIGTERM)
    # The step never ends: that the process exits at all is the drain's bound.
    assert proc.wait(timeout=60) == 1
    log = workers.log(proc)
    assert "finishing 1 in-flight workflows within 0.5s" in log
    assert "the drain timeout (0.5s) passed: abandoning 1 in-flight workflows" in log
    info = await handle.info()
    assert info.status is WorkflowStatus.RUNNING, "left to its lease's expiry"
    assert info.locked_by is not None and f":{proc.pid}:" in info.locked_by
