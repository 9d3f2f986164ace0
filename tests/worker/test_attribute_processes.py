"""Searchable attributes across a SIGKILL of the worker running the body (issue 22).

Real ``durable worker`` processes on PostgreSQL. A worker started with ``TAG_HOLD=1``
blocks in the body's ``hold`` step, after its first ``set_attributes``, and is killed
there; a second worker resumes the body. The attributes are there once each, the call
before the kill recorded once, and a list in this process finds the workflow by them.
"""

from __future__ import annotations

import signal

import asyncpg

from durable_core import AttributeRange, DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker.apps import tagging
from tests.worker.conftest import Workers, eventually

LEASE = 2
APP = "tests.worker.apps.tagging"


async def test_a_sigkill_after_set_attributes_keeps_them_once(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    handle = await client.with_options(attributes={"source": "api"}).start_workflow(
        tagging.tagged_order, "o-1", 120.5
    )
    victim = workers.start(app=APP, TAG_HOLD=1, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)

    async def holding() -> bool:
        held = await sql.fetchval(
            "SELECT count(*) FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2 "
            "AND status = 'running'",
            handle.id,
            tagging.hold.name,
        )
        return bool(held == 1)

    await eventually(holding, timeout=120, what="the body to enter its hold step")
    # Written by the worker's body, found from this process through the index.
    found = await client.list_workflows(
        attributes={"customer": "acme", "amount": AttributeRange(100, 200), "source": "api"}
    )
    assert [r.id for r in found] == [handle.id]
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=120)

    workers.start(app=APP, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert await handle.attributes() == {
        "amount": 120.5,
        "customer": "acme",
        "source": "api",
        "stage": "shipped",
    }
    rows = await sql.fetch(
        "SELECT name, count(*) AS n FROM workflow_attributes WHERE workflow_id = $1 "
        "GROUP BY name ORDER BY name",
        handle.id,
    )
    assert [(r["name"], r["n"]) for r in rows] == [
        ("amount", 1),
        ("customer", 1),
        ("source", 1),
        ("stage", 1),
    ]
    calls = await sql.fetch(
        "SELECT step_index, input FROM workflow_steps WHERE workflow_id = $1 "
        "AND step_name = 'durable.set_attributes' ORDER BY step_index",
        handle.id,
    )
    assert [(r["step_index"], r["input"]) for r in calls] == [
        (0, '["amount", "customer"]'),
        (2, '["stage"]'),
    ], "each call recorded once, across the kill"
    attempts = await sql.fetchval("SELECT attempts FROM workflows WHERE id = $1", handle.id)
    assert attempts == 2
    found = await client.list_workflows(attributes={"stage": "shipped", "customer": "acme"})
    assert [r.id for r in found] == [handle.id]
