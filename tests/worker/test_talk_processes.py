"""Streams and updates across a SIGKILL of the worker running the body (issue 22).

Real ``durable worker`` processes on PostgreSQL; a reader in this process, woken by
``NOTIFY``. A worker started with ``TALK_HOLD=1`` blocks in the body's ``hold`` step
(``tests/worker/apps/talk.py``), where it is killed; a second worker resumes the body.
"""

from __future__ import annotations

import signal
import subprocess
from typing import Any

import anyio
import asyncpg

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker.apps import talk
from tests.worker.conftest import Workers, eventually

LEASE = 2
APP = "tests.worker.apps.talk"


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and reap it."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)


async def test_sigkill_after_some_stream_values_neither_loses_nor_repeats_one(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(talk.ticker, 10, 4)
    seen: list[Any] = []

    async def read() -> None:
        async for value in handle.read_stream("ticks"):
            seen.append(value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        victim = workers.start(app=APP, TALK_HOLD=1, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)

        async def five_read() -> bool:
            return len(seen) == 5

        await eventually(five_read, timeout=120, what="the reader to read the first five values")

        async def holding() -> bool:
            held = await sql.fetchval(
                "SELECT count(*) FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2 "
                "AND status = 'running'",
                handle.id,
                talk.hold.name,
            )
            return bool(held == 1)

        await eventually(holding, timeout=120, what="the body to enter its hold step")
        assert seen == [0, 1, 2, 3, 4]
        kill(victim)
        workers.start(app=APP, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
        assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert seen == list(range(10)), "every value once, in order, across the kill"
    rows = await sql.fetch(
        "SELECT stream_offset, value FROM workflow_streams WHERE workflow_id = $1 "
        "ORDER BY stream_offset",
        handle.id,
    )
    assert [(r["stream_offset"], r["value"]) for r in rows] == [
        *((i, str(i)) for i in range(10)),
        (10, None),
    ]
    writes = await sql.fetchval(
        "SELECT count(*) FROM workflow_steps WHERE workflow_id = $1 "
        "AND step_name = 'durable.write_stream'",
        handle.id,
    )
    assert writes == 10
    assert (await handle.info()).attempts == 2


async def test_sigkill_between_receiving_an_update_and_replying_gives_one_reply(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    handle = await client.start_workflow(talk.approver)
    victim = workers.start(app=APP, TALK_HOLD=1, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    replies: list[Any] = []

    async def caller() -> None:
        replies.append(await client.update(handle.id, "approve", {"amount": 21}, update_id="c1"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)

        async def holding() -> bool:
            held = await sql.fetchval(
                "SELECT count(*) FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2 "
                "AND status = 'running'",
                handle.id,
                talk.hold.name,
            )
            return bool(held == 1)

        await eventually(holding, timeout=120, what="the body to hold after taking the update")
        status = await sql.fetchval(
            "SELECT status FROM workflow_updates WHERE workflow_id = $1 AND update_id = 'c1'",
            handle.id,
        )
        assert (status, replies) == ("taken", []), "received, not replied, when the worker dies"
        kill(victim)
        workers.start(app=APP, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    assert replies == [{"doubled": 42}]
    assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 42
    again = await client.update(handle.id, "approve", {"amount": 21}, update_id="c1")
    assert again == {"doubled": 42}, "a retried caller gets the same reply"
    steps = await sql.fetch(
        "SELECT step_name, attempts FROM workflow_steps WHERE workflow_id = $1 ORDER BY step_index",
        handle.id,
    )
    assert [(s["step_name"], s["attempts"]) for s in steps] == [
        ("durable.recv_update", 1),
        (talk.apply_approval.name, 1),
        (talk.hold.name, 2),
        ("durable.reply_update", 1),
    ], "taken and handled once; only the step the kill interrupted ran again"
    rows = await sql.fetch(
        "SELECT status, reply FROM workflow_updates WHERE workflow_id = $1", handle.id
    )
    assert [(r["status"], r["reply"]) for r in rows] == [("replied", '{"doubled":42}')]
    assert (await handle.info()).attempts == 2
