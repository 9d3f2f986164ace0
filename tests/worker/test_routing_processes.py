"""Routing and flow with real worker processes on PostgreSQL: workers claim only what they
run, queue limits hold across a fleet, priorities order a backlog."""

from __future__ import annotations

from datetime import timedelta

import anyio
import asyncpg
import pytest

from durable_core import DurableClient
from durable_core.seams.records import NewWorkflow, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker.apps import limited, reports, shop
from tests.worker.conftest import Workers, eventually

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def statuses(sql: asyncpg.Connection, name: str) -> dict[str, int]:
    rows = await sql.fetch(
        "SELECT status, count(*) AS n FROM workflows WHERE name = $1 GROUP BY status", name
    )
    return {row["status"]: row["n"] for row in rows}


async def test_workers_with_different_apps_each_run_only_their_own_workflows(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    await client.start_workflows(shop.checkout, [(n,) for n in range(20)])
    await client.start_workflows(reports.build, [(n,) for n in range(20)])
    stranger = NewWorkflow(id="nobody-serves-me", name="gone.workflow", input="[]", max_attempts=3)
    await pg.enqueue([stranger])
    shop_worker = workers.start(app="tests.worker.apps.shop", WORKFLOW_CONCURRENCY=4)
    reports_worker = workers.start(app="tests.worker.apps.reports", WORKFLOW_CONCURRENCY=4)

    async def all_done() -> bool:
        done = [await statuses(sql, w.name) for w in (shop.checkout, reports.build)]
        return done == [{"succeeded": 20}, {"succeeded": 20}]

    await eventually(all_done, timeout=60, what="both apps' workflows to succeed")
    outputs = await sql.fetch("SELECT name, output, locked_by FROM workflows")
    by_name = {row["name"] for row in outputs}
    assert by_name == {"shop.checkout", "reports.build", "gone.workflow"}
    record = await pg.get_workflow(stranger.id)
    assert record is not None
    assert (record.status, record.attempts) == (WorkflowStatus.PENDING, 0)
    for proc in (shop_worker, reports_worker):
        assert "UnknownWorkflowError" not in workers.log(proc)
        assert proc.poll() is None


async def test_a_worker_serves_only_the_queues_it_is_given(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    await client.start_workflows(limited.quick, [(n,) for n in range(5)])
    await client.with_options(queue="urgent").start_workflows(
        limited.quick, [(n,) for n in range(5, 8)]
    )
    workers.start("--queue", "urgent", app="tests.worker.apps.limited")

    async def urgent_done() -> bool:
        count = "SELECT count(*) FROM workflows WHERE queue = 'urgent' AND status = 'succeeded'"
        return bool(await sql.fetchval(count) == 3)

    await eventually(urgent_done, timeout=120, what="the urgent queue to drain")
    await anyio.sleep(0.5)
    pending = "SELECT count(*) FROM workflows WHERE queue = 'default' AND status = 'pending'"
    assert await sql.fetchval(pending) == 5


async def test_a_queue_concurrency_limit_holds_across_three_workers(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    await DurableClient(pg).start_workflows(limited.hold, [(0.3,) for _ in range(12)])
    for _ in range(3):
        workers.start(app="tests.worker.apps.limited", WORKFLOW_CONCURRENCY=8)
    running_now = "SELECT count(*) FROM workflows WHERE queue = 'limited' AND status = 'running'"
    samples: list[int] = []
    with anyio.fail_after(90):
        while (await statuses(sql, limited.hold.name)).get("succeeded", 0) < 12:
            samples.append(await sql.fetchval(running_now))
            await anyio.sleep(0.01)
    assert max(samples) == 2, f"running at once, sampled: {sorted(set(samples))}"
    assert len(samples) > 50
    assert await statuses(sql, limited.hold.name) == {"succeeded": 12}


async def test_a_rate_limit_paces_starts_across_workers(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    await DurableClient(pg).start_workflows(limited.tick, [(n,) for n in range(50)])
    for _ in range(2):
        workers.start(app="tests.worker.apps.limited", WORKFLOW_CONCURRENCY=8)

    async def done() -> bool:
        return await statuses(sql, limited.tick.name) == {"succeeded": 50}

    await eventually(done, timeout=60, what="50 paced workflows to succeed")
    starts = [
        row["started_at"]
        for row in await sql.fetch(
            "SELECT started_at FROM workflows WHERE queue = 'paced' ORDER BY started_at"
        )
    ]
    span = (starts[-1] - starts[0]).total_seconds()
    assert span >= 3.9, f"50 starts at 10/s took {span:.2f}s"
    # No window of one second holds more than ten starts.
    for end in starts:
        inside = [s for s in starts if end - timedelta(seconds=1) < s <= end]
        assert len(inside) <= 10, f"{len(inside)} starts in the second before {end}"


async def test_a_higher_priority_backlog_is_claimed_first(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    await client.start_workflows(limited.quick, [(n,) for n in range(30)])
    urgent = await client.with_options(priority=10).start_workflows(
        limited.quick, [(n,) for n in range(100, 105)]
    )
    workers.start(app="tests.worker.apps.limited", WORKFLOW_CONCURRENCY=1)

    async def done() -> bool:
        return await statuses(sql, limited.quick.name) == {"succeeded": 35}

    await eventually(done, timeout=60, what="the backlog to drain")
    order = [
        row["id"] for row in await sql.fetch("SELECT id FROM workflows ORDER BY started_at, id")
    ]
    assert set(order[:5]) == {handle.id for handle in urgent}


async def test_a_crashed_workers_slots_are_freed_when_its_leases_expire(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    await DurableClient(pg).start_workflows(limited.hold, [(1.0,) for _ in range(4)])
    doomed = workers.start(
        app="tests.worker.apps.limited", WORKFLOW_CONCURRENCY=8, WORKFLOW_LOCK_TIMEOUT_SECS=2
    )
    running_now = (
        "SELECT count(*) FROM workflows WHERE queue = 'limited' AND status = 'running' "
        "AND locked_until >= now()"
    )

    async def holding_two() -> bool:
        return bool(await sql.fetchval(running_now) == 2)

    await eventually(holding_two, timeout=120, what="the first worker to hold both slots")
    doomed.kill()
    doomed.wait(timeout=120)
    workers.start(
        app="tests.worker.apps.limited", WORKFLOW_CONCURRENCY=8, WORKFLOW_LOCK_TIMEOUT_SECS=2
    )
    samples: list[int] = []
    with anyio.fail_after(60):
        while (await statuses(sql, limited.hold.name)).get("succeeded", 0) < 4:
            samples.append(await sql.fetchval(running_now))
            await anyio.sleep(0.01)
    assert max(samples) <= 2
    attempts = sorted(r["attempts"] for r in await sql.fetch("SELECT attempts FROM workflows"))
    assert attempts == [1, 1, 2, 2], "the two crashed runs were reclaimed, the others ran once"
