"""A paused worker's late effect does not land (issue 34, defect 5).

Real ``durable worker`` processes on PostgreSQL. The first worker (the zombie) holds in the
body, its step's end committed (it owes no write), and is SIGSTOPped there past its lease;
a second worker (the owner) takes the workflow over and finishes it, writing the effect
once; then the zombie is released and SIGCONTed and goes on to write its own effect. That
write must be refused in its own transaction: exactly one effect, the owner's, stays.

The test owns the clock of the zombie's lease: the zombie's lock timeout is long (its lease
keeper renews only every five minutes) and, while it is stopped, the row's lease end is
moved to the past, as a pause longer than the lease leaves it. With a short lock timeout
the zombie's renewal would be overdue when it resumes, and its refusal (one round trip)
would end the attempt before the body's effect (a transaction of several) almost every
time: the test would pass without fencing and prove nothing.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from durable_core import DurableClient, WorkflowHandle, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker.apps import fencing
from tests.worker.conftest import Workers, eventually

APP = "tests.worker.apps.fencing"

Landed = Callable[[asyncpg.Connection], Awaitable[list[str]]]


Start = Callable[[DurableClient, PostgresStore], Awaitable[tuple[WorkflowHandle[int], Landed]]]
"""Starts a workflow of one kind of effect; with what reads back what its effects wrote (each
marked with the attempt that wrote it)."""


async def _sends(client: DurableClient, pg: PostgresStore) -> tuple[WorkflowHandle[int], Landed]:
    to = await client.start_workflow_later(3600, fencing.target)
    handle = await client.start_workflow(fencing.sends, to.id)

    async def landed(sql: asyncpg.Connection) -> list[str]:
        rows = await sql.fetch(
            "SELECT message_id FROM workflow_messages WHERE workflow_id = $1 ORDER BY seq", to.id
        )
        return [r["message_id"].removeprefix("fence-") for r in rows]

    return handle, landed


async def _starts(client: DurableClient, pg: PostgresStore) -> tuple[WorkflowHandle[int], Landed]:
    handle = await client.start_workflow(fencing.starts)

    async def landed(sql: asyncpg.Connection) -> list[str]:
        rows = await sql.fetch(
            "SELECT id FROM workflows WHERE parent_id = $1 ORDER BY id", handle.id
        )
        return [r["id"].removeprefix(f"{handle.id}-child-") for r in rows]

    return handle, landed


def _own(workflow: Callable[[], Awaitable[int]], query: str) -> Start:
    """A kind whose effect lands in the workflow's own rows, read by ``query`` ($1: its id)."""

    async def start(client: DurableClient, pg: PostgresStore) -> tuple[WorkflowHandle[int], Landed]:
        handle = await client.start_workflow(workflow)

        async def landed(sql: asyncpg.Connection) -> list[str]:
            return [str(value) for value in [r[0] for r in await sql.fetch(query, handle.id)]]

        return handle, landed

    return start


async def _replies(client: DurableClient, pg: PostgresStore) -> tuple[WorkflowHandle[int], Landed]:
    handle = await client.start_workflow(fencing.replies)
    await pg.send_update(handle.id, "u-1", "ask", "null")

    async def landed(sql: asyncpg.Connection) -> list[str]:
        rows = await sql.fetch(
            "SELECT status, reply FROM workflow_updates WHERE workflow_id = $1", handle.id
        )
        return [r["reply"] for r in rows if r["status"] == "replied"]

    return handle, landed


KINDS: dict[str, Start] = {
    "send": _sends,
    "child_start": _starts,
    "set_event": _own(
        fencing.publishes,
        "SELECT value FROM workflow_events WHERE workflow_id = $1 AND key = 'owner'",
    ),
    "stream_write": _own(
        fencing.streams,
        "SELECT value FROM workflow_streams WHERE workflow_id = $1 ORDER BY stream_offset",
    ),
    "attribute_set": _own(
        fencing.tags,
        "SELECT value_number::int FROM workflow_attributes "
        "WHERE workflow_id = $1 AND name = 'owner'",
    ),
    "update_reply": _replies,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_paused_workers_late_effect_is_refused_in_its_transaction(
    kind: str, pg: PostgresStore, workers: Workers, sql: asyncpg.Connection, tmp_path: Path
) -> None:
    client = DurableClient(pg)
    handle, landed = await KINDS[kind](client, pg)
    here = {"FENCE_DIR": str(tmp_path)}
    zombie = workers.start(app=APP, WORKFLOW_CONCURRENCY=1, WORKFLOW_LOCK_TIMEOUT_SECS=600, **here)

    async def holding() -> bool:
        before = await sql.fetchval(
            "SELECT status FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2",
            handle.id,
            fencing.before.name,
        )
        return before == "succeeded" and (tmp_path / f"{handle.id}.held").exists()

    await eventually(holding, timeout=120, what="the zombie to hold, its step committed")
    zombie.send_signal(signal.SIGSTOP)
    try:
        # The pause outlasts the lease: its end moves to the past, as the clock would move it.
        expired = await sql.execute(
            "UPDATE workflows SET locked_until = now() - interval '1 second' "
            "WHERE id = $1 AND status = 'running'",
            handle.id,
        )
        assert expired == "UPDATE 1"
        owner = workers.start(app=APP, WORKFLOW_CONCURRENCY=1, WORKFLOW_LOCK_TIMEOUT_SECS=2, **here)
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
        assert await handle.output() == 2 and await landed(sql) == ["2"]
        (tmp_path / f"{handle.id}.release").touch()
    finally:
        zombie.send_signal(signal.SIGCONT)

    async def zombie_noticed() -> bool:
        return "lost the lease" in workers.log(zombie)

    await eventually(zombie_noticed, timeout=120, what="the zombie to report its lost lease")
    assert await landed(sql) == ["2"], "only the owner's effect landed"
    info = await handle.info()
    assert (info.status, info.attempts, await handle.output()) == (WorkflowStatus.SUCCEEDED, 2, 2)
    zombie.send_signal(signal.SIGTERM)
    owner.send_signal(signal.SIGTERM)
    assert zombie.wait(timeout=120) == 0 and owner.wait(timeout=120) == 0
