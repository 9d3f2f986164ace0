"""Concurrency inside a body on real worker processes: a gather of steps, of sleeps and of
child joins, each with a worker SIGKILLed in the middle. Every branch's committed work is
kept, and nothing that committed runs twice."""

from __future__ import annotations

import json
import signal
from collections import Counter

import asyncpg
import pytest

from durable_core import DurableClient, Workflow, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually, side_table_writes_ended

LEASE = 2

pytestmark = pytest.mark.anyio  # marked at collection too, so parametrize keeps its ids


async def _runs(sql: asyncpg.Connection, like: str) -> Counter[tuple[str, str]]:
    rows = await sql.fetch("SELECT workflow_id, step FROM step_runs WHERE step LIKE $1", like)
    return Counter((r["workflow_id"], r["step"]) for r in rows)


async def _kill_when(workers: Workers, sql: asyncpg.Connection, victim: object, query: str) -> None:
    async def reached() -> bool:
        return bool(await sql.fetchval(query))

    await eventually(reached, timeout=60, what=query)
    proc = workers.procs[workers.procs.index(victim)]  # type: ignore[arg-type]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)

    async def flushes_ended() -> bool:  # a statement the dead worker sent may still commit
        return not await sql.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
            " AND datname = current_database()"
            " AND query LIKE '%unnest%' AND pid <> pg_backend_pid()"
        )

    await eventually(flushes_ended, timeout=120, what="the killed worker's statements to end")
    await side_table_writes_ended(sql)


async def _committed(sql: asyncpg.Connection, step: str, label: str) -> set[tuple[str, str]]:
    """The succeeded rows of ``step`` now, as (workflow, ``label`` + its first argument)
    pairs: the names its runs have in ``step_runs``."""
    rows = await sql.fetch(
        "SELECT workflow_id, input FROM workflow_steps WHERE status = 'succeeded'"
        " AND step_name = $1",
        f"tests.worker.app.{step}",
    )
    return {(r["workflow_id"], f"{label}{json.loads(r['input'])['args'][0]}") for r in rows}


async def test_sigkill_during_a_gather_of_steps_keeps_every_committed_branch(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    handles = await client.start_workflows(app.gathered_steps, [(4, 5, 0.3)] * 3)
    victim = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=8)
    await _kill_when(
        workers, sql, victim, "SELECT count(*) >= 20 FROM step_runs WHERE step LIKE 'paced%'"
    )
    committed = await _committed(sql, "paced_step", "paced")
    ran_before = set(await _runs(sql, "paced%"))
    assert committed and committed < ran_before | committed

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=8)
    for handle in handles:
        assert await handle.wait_with_timeout(90) is WorkflowStatus.SUCCEEDED
        assert await handle.output() == [sum(b * 100 + s for s in range(5)) for b in range(4)]
    runs = await _runs(sql, "paced%")
    assert len(runs) == 3 * 4 * 5, "every step of every branch ran"
    assert set(runs.values()) <= {1, 2}
    again = {key for key, n in runs.items() if n == 2}
    assert not again & committed, "a step committed before the kill ran again"
    assert again == ran_before - committed, "exactly the uncommitted steps ran again"


@pytest.mark.parametrize(
    ("body", "args", "output", "runs"),
    [
        (app.beside_own_steps, (6, 0.2), [15, sum(1000 + i for i in range(6))], 12),
        (app.spawned_in_a_loop, (6, 0.2), sum(500 + i for i in range(6)), 12),
    ],
    ids=["a background task beside the body's steps", "branches spawned in a loop"],
)
async def test_sigkill_beside_the_bodys_own_steps_runs_no_committed_step_again(
    pg: PostgresStore,
    workers: Workers,
    sql: asyncpg.Connection,
    body: Workflow[..., object],
    args: tuple[int, float],
    output: object,
    runs: int,
) -> None:
    """Branches started beside the body's own steps took the body's places on the replay
    after a kill, so finished steps ran again (issue 34, defect 1)."""
    client = DurableClient(pg)
    handles = await client.start_workflows(body, [args] * 3)
    victim = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=8)
    await _kill_when(
        workers, sql, victim, "SELECT count(*) >= 15 FROM step_runs WHERE step LIKE 'paced%'"
    )
    committed = await _committed(sql, "paced_step", "paced")
    assert committed

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=8)
    for handle in handles:
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
        assert await handle.output() == output
    ran = await _runs(sql, "paced%")
    assert len(ran) == 3 * runs, "every step of every branch ran"
    again = {key for key, n in ran.items() if n > 1}
    assert not again & committed, f"steps committed before the kill ran again: {again & committed}"


async def test_sigkill_during_a_gather_of_sleeps_wakes_every_branch_once(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    handles = await client.start_workflows(app.gathered_sleeps, [([0.5, 2.0, 3.0],)] * 4)
    victim = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    # Killed once each workflow's first nap is over, its others still asleep.
    await _kill_when(
        workers,
        sql,
        victim,
        "SELECT count(DISTINCT workflow_id) = 4 FROM step_runs WHERE step = 'nap0'",
    )
    waiting = await sql.fetch("SELECT status, waiting_for FROM workflows")
    committed = await _committed(sql, "napped", "nap")

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    for handle in handles:
        assert await handle.wait_with_timeout(90) is WorkflowStatus.SUCCEEDED
        assert await handle.output() == ["nap0", "nap1", "nap2"]
    runs = await _runs(sql, "nap%")
    assert len(runs) == 12 and set(runs.values()) <= {1, 2}, runs
    again = {key for key, n in runs.items() if n == 2}
    assert not again & committed, "a branch's step committed before the kill ran again"
    attempts = await sql.fetch(
        "SELECT attempts FROM workflows WHERE id = any($1)", [h.id for h in handles]
    )
    assert all(r["attempts"] <= 2 for r in attempts), "waking costs no attempt, the kill one"
    assert {r["status"] for r in waiting} <= {"waiting", "running", "pending"}


async def test_sigkill_during_a_gather_of_child_joins_loses_no_child(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    parent = await client.start_workflow(app.gathered_children, 6, 3)
    victim = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=8)
    await _kill_when(
        workers,
        sql,
        victim,
        "SELECT count(*) > 0 FROM step_runs WHERE step = 'hanging'"
        f" AND (SELECT status FROM workflows WHERE id = '{parent.id}') = 'waiting'",
    )
    settled = {
        r["id"]
        for r in await sql.fetch(
            "SELECT id FROM workflows WHERE parent_id = $1 AND status = 'succeeded'", parent.id
        )
    }
    record = await parent.info()
    assert record.status is WorkflowStatus.WAITING and record.waiting_for is not None
    assert record.waiting_for.startswith(("any:", "child:")), record.waiting_for

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=8)
    assert await parent.wait_with_timeout(90) is WorkflowStatus.SUCCEEDED
    assert await parent.output() == sum(2 * i for i in range(6))
    children = await sql.fetch(
        "SELECT id, status FROM workflows WHERE parent_id = $1 ORDER BY id", parent.id
    )
    assert len(children) == 6 and {c["status"] for c in children} == {"succeeded"}
    runs = await _runs(sql, "child")
    per_child = Counter(w for (w, _), n in runs.items() for _ in range(n))
    hanging = {w for (w, step) in await _runs(sql, "hanging")}
    assert len(hanging) == 1 and per_child[hanging.pop()] == 2, "the hanging child ran again"
    assert all(per_child[w] == 1 for w in settled), "a child settled before the kill ran again"
    assert set(per_child.values()) <= {1, 2}
    starts = await sql.fetchval(
        "SELECT count(*) FROM workflow_steps"
        " WHERE workflow_id = $1 AND step_name = 'durable.start'",
        parent.id,
    )
    assert starts == 1, "the children were started once"


async def test_a_hundred_children_joined_by_gather_at_concurrency_one(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    parent = await DurableClient(pg).start_workflow(app.gathered_children, 100)
    workers.start(WORKFLOW_CONCURRENCY=1)
    assert await parent.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    assert await parent.output() == sum(2 * i for i in range(100))
    assert await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = 'child'") == 100
