"""A key rotation across a SIGKILL (issue 37): values written under key A, a worker killed
mid-workflow, key B made current with A kept for reading, a new worker: every workflow
completes, and the database holds no plaintext of them (``pg_dump``)."""

from __future__ import annotations

import os
import signal
import subprocess

import asyncpg
import pytest

from durable_core import DurableClient, EncryptionKeyError, WorkflowStatus
from durable_core.codec import decode
from durable_postgres import PostgresStore
from tests.encryption_support import encrypting, keys_env
from tests.private_flows import person
from tests.worker.apps.private import rotated
from tests.worker.conftest import Workers, eventually, plain, side_table_writes_ended

APP = "tests.worker.apps.private"
SIDE_TABLE = ("--bootstrap", "tests.worker.app:bootstrap")


async def test_a_key_rotation_across_a_sigkill_completes_and_stores_no_plaintext(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection, postgres_url: str
) -> None:
    key_a, key_b = os.urandom(32), os.urandom(32)
    people = [person(f"Grace Hopper{n}") for n in range(6)]
    client = DurableClient(pg)
    with encrypting({"A": key_a}):
        handles = [await client.start_workflow(rotated, who) for who in people]
        for n, handle in enumerate(handles[:3]):  # messages waiting, under A
            await client.send(handle.id, f"approved by Lovelace {n}", topic="approval")
    victim = workers.start(
        *SIDE_TABLE,
        app=APP,
        PRIVATE_HOLD=1,
        WORKFLOW_LOCK_TIMEOUT_SECS=2,
        WORKFLOW_CONCURRENCY=len(people),
        **keys_env({"A": key_a}),
    )

    async def all_held() -> bool:
        query = "SELECT count(DISTINCT workflow_id) FROM step_runs WHERE step = 'hold'"
        return bool(await sql.fetchval(query) == len(people))

    await eventually(all_held, timeout=120, what="every workflow to enter its held step")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=120)
    await side_table_writes_ended(sql)
    running = await sql.fetchval("SELECT count(*) FROM workflows WHERE status = 'running'")
    assert running == len(people), "killed mid-workflow, every one of them"

    # The rotation: B is current, A is kept to read what was written under it.
    with encrypting({"A": key_a, "B": key_b}, current="B"):
        for n, handle in enumerate(handles[3:], start=3):
            await client.send(handle.id, f"approved by Lovelace {n}", topic="approval")
        workers.start(
            *SIDE_TABLE,
            app=APP,
            WORKFLOW_LOCK_TIMEOUT_SECS=2,
            WORKFLOW_CONCURRENCY=len(people),
            **keys_env({"A": key_a, "B": key_b}, current="B"),
        )
        for n, (handle, who) in enumerate(zip(handles, people, strict=True)):
            assert await handle.wait_with_timeout(300) is WorkflowStatus.SUCCEEDED
            assert await handle.output() == {
                "letter": f"Dear {who.name}",
                "held": f"held for {who.email}",
                "note": f"approved by Lovelace {n}",
            }
            assert await handle.get_event("letter") == f"Dear {who.name}"
            assert (await handle.info()).attempts == 2  # reclaimed from the killed worker
        held = await sql.fetch("SELECT output FROM workflow_steps WHERE step_name = 'private.hold'")
        greeted = await sql.fetch(
            "SELECT output FROM workflow_steps WHERE step_name = 'private.greet'"
        )
    # What ran before the kill is under A; what ran after the rotation, under B.
    assert all(row["output"].startswith("@aes-gcm:A:") for row in greeted)
    assert all(row["output"].startswith("@aes-gcm:B:") for row in held)
    outputs = await sql.fetch("SELECT output FROM workflows WHERE name = 'private.rotated'")
    assert all(row["output"].startswith("@aes-gcm:B:") for row in outputs)

    dumped = subprocess.run(
        ["pg_dump", "--data-only", plain(postgres_url)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dumped.returncode == 0, dumped.stderr
    for secret in ("Grace", "Hopper", "example.org", "Dear", "held for", "Lovelace"):
        assert secret not in dumped.stdout, secret
    assert "@aes-gcm:A:" in dumped.stdout and "@aes-gcm:B:" in dumped.stdout

    # Why A is kept: without it, what was written under it cannot be read.
    with encrypting({"B": key_b}), pytest.raises(EncryptionKeyError, match="key 'A'"):
        decode(greeted[0]["output"])
