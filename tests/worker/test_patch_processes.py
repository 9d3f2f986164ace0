"""A deploy while instances sleep: version 1 of a workflow on one worker process,
then version 2 (a patch marker) on another, on the real PostgreSQL."""

from __future__ import annotations

import signal

import asyncpg

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import checkout_v1
from tests.worker.conftest import Workers, eventually


async def test_instances_of_version_1_and_2_both_complete_after_the_deploy(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    v1_worker = workers.start("--app", "tests.worker.checkout_v1")
    # The rows name the workflow only, so version 1's definition starts both kinds.
    old = await client.start_workflows(checkout_v1.checkout, [(100, 4.0)] * 3)
    old_ids = [h.id for h in old]

    async def all_asleep() -> bool:
        waiting = await sql.fetchval(
            "SELECT count(*) FROM workflows WHERE id = any($1) AND waiting_for = 'sleep'", old_ids
        )
        return int(waiting) == 3

    await eventually(all_asleep, timeout=120, what="three version-1 instances asleep")
    v1_worker.send_signal(signal.SIGTERM)  # the deploy: stop the old code gracefully
    assert v1_worker.wait(timeout=120) == 0, workers.log(v1_worker)

    workers.start("--app", "tests.worker.checkout_v2")
    new = await client.start_workflows(checkout_v1.checkout, [(100, 0.5)] * 2)
    for handle in [*old, *new]:
        assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED

    for handle in old:
        assert await handle.output() == "shipped, paid 100"
        steps = [s.step_name for s in await handle.steps()]
        assert steps == ["checkout.charge", "durable.sleep", "checkout.ship"]
    for handle in new:
        assert await handle.output() == "shipped, paid 120"
        steps = [s.step_name for s in await handle.steps()]
        assert steps == [
            "durable.patch:tax",
            "checkout.charge_with_tax",
            "durable.sleep",
            "checkout.ship",
        ]
    runs = await sql.fetch(
        "SELECT step, count(*) AS n, count(DISTINCT workflow_id) AS workflows "
        "FROM step_runs GROUP BY step ORDER BY step"
    )
    assert [(r["step"], r["n"], r["workflows"]) for r in runs] == [
        ("charge", 3, 3),
        ("charge_with_tax", 2, 2),
        ("ship", 5, 5),
    ], "each step body ran once per instance: the old charge was replayed, not run again"
