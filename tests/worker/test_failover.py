"""A streaming replica promoted while workers run 500 workflows.

Two clusters of the test's own: a primary and a replica made from it with
``pg_basebackup -R``. Workers, a client and the dashboard are given both hosts in
one URL (``target_session_attrs=read-write``). The primary is stopped (fast) and the
replica promoted (``pg_ctl promote``) while the workflows run: every workflow ends
once, nothing committed before the switch is lost or run again, the workers say in
one line that the database is back, with no traceback, and the client and the
dashboard carry on with the objects they had before the switch.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import asyncpg
import httpx
import pytest

from durable_core import DurableClient, WorkflowStatus
from durable_core.dashboard import create_app
from durable_core.errors import StoreUnavailableError
from durable_postgres import PostgresStore
from tests.worker import clusters, failover_app
from tests.worker.app import SIDE_TABLE_DDL
from tests.worker.clusters import Cluster
from tests.worker.conftest import Workers, eventually

PREFIX = "durable_failover"
TOTAL = 500
GUARD = 180.0
"""A hung wait fails after this long (it never bounds how fast anything must be)."""


def _as_postgres(program: str, *args: str) -> None:
    """Run one of PostgreSQL's programs as the ``postgres`` user (it owns the data)."""
    path = f"/usr/lib/postgresql/{clusters.version()}/bin/{program}"
    done = subprocess.run(
        ["runuser", "-u", "postgres", "--", path, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{program} failed: {done.stderr}"


@pytest.fixture
def pair() -> Iterator[tuple[Cluster, Cluster]]:
    """A primary and its streaming replica, both dropped when the test ends."""
    clusters.drop_leftovers(PREFIX)
    primary = Cluster(f"{PREFIX}_{os.getpid()}_primary", clusters.free_port())
    replica = Cluster(f"{PREFIX}_{os.getpid()}_replica", clusters.free_port())
    try:
        primary.create()
        replica.create(start=False)
        for item in replica.data.iterdir():  # an empty folder the postgres user owns
            shutil.rmtree(item) if item.is_dir() else item.unlink()
        _as_postgres(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(replica.data), "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        replica.ctl("start")
        yield primary, replica
    finally:
        replica.drop_if_there()
        primary.drop_if_there()


async def _streaming(primary: Cluster) -> bool:
    conn = await asyncpg.connect(primary.url)
    try:
        return bool(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
            )
        )
    finally:
        await conn.close()


async def test_a_replica_promoted_under_load(pair: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    primary, replica = pair
    url = (
        f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{replica.port}/postgres"
        "?target_session_attrs=read-write"
    )
    await eventually(lambda: _streaming(primary), timeout=GUARD, what="the replica to stream")
    store = PostgresStore(url)
    await store.open()
    await store.apply_schema()
    await store.connector.pool.execute(SIDE_TABLE_DDL)
    client = DurableClient(store)
    dashboard = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(store, allowed_hosts=["dashboard"])),
        base_url="http://dashboard",
    )
    workers = Workers(url, tmp_path)
    try:
        handles = await client.start_workflows(failover_app.hops, [(n, 0.05) for n in range(TOTAL)])
        procs = [
            workers.start(
                "--bootstrap",
                "tests.worker.failover_app:bootstrap",
                app="tests.worker.failover_app",
                WORKFLOW_CONCURRENCY=24,
                WORKFLOW_LOCK_TIMEOUT_SECS=30,
            )
            for _ in range(2)
        ]
        old = await asyncpg.connect(primary.url)

        async def running() -> bool:
            started = all("started: concurrency" in workers.log(proc) for proc in procs)
            done = await old.fetchval("SELECT count(*) FROM workflows WHERE status = 'succeeded'")
            return started and done >= TOTAL // 5

        await eventually(running, timeout=GUARD, what="a fifth of the workflows to succeed")
        # What the old primary had committed just before it went away: the settled
        # workflows and every step's recorded output, read at one instant.
        async with old.transaction(isolation="repeatable_read"):
            switch_at = await old.fetchval("SELECT clock_timestamp()")
            settled = {
                row["id"]: row["output"]
                for row in await old.fetch(
                    "SELECT id, output FROM workflows WHERE status = 'succeeded'"
                )
            }
            recorded = {
                (row["workflow_id"], row["step_index"]): row["output"]
                for row in await old.fetch(
                    "SELECT workflow_id, step_index, output FROM workflow_steps "
                    "WHERE status = 'succeeded'"
                )
            }
        await old.close()
        assert len(settled) < TOTAL, "the switch happens while workflows run"

        # A caller waiting on a result when the primary goes away gets it from the new one.
        waited: list[WorkflowStatus] = []
        unsettled = next(h for h in reversed(handles) if h.id not in settled)

        async def wait_across() -> None:
            waited.append(await unsettled.wait_with_timeout(GUARD))

        async with anyio.create_task_group() as waiters:
            waiters.start_soon(wait_across)
            primary.ctl("stop", "-m", "fast")
            # The old primary is gone, the replica not promoted yet: no host takes writes.
            with pytest.raises(StoreUnavailableError, match="unavailable"):
                await client.start_workflow(failover_app.hops, 10_000, 0.0)
            meanwhile = await dashboard.get("/")
            assert meanwhile.status_code == 503, meanwhile.text
            assert "database unavailable" in meanwhile.text
            assert meanwhile.headers["retry-after"] == "5"
            promoted_at = time.monotonic()
            _as_postgres("pg_ctl", "promote", "-w", "-D", str(replica.data))

            # The same client starts a workflow on the new primary and waits for its result.
            late = await client.start_workflow(failover_app.hops, 10_000, 0.0)
            assert await late.wait_with_timeout(GUARD) is WorkflowStatus.SUCCEEDED
            assert await late.output() == 30_003
        assert waited == [WorkflowStatus.SUCCEEDED]
        # The same dashboard app serves a page from the new primary.
        page = await dashboard.get("/")
        assert page.status_code == 200, page.text

        new = await asyncpg.connect(replica.url)
        try:

            async def all_done() -> bool:
                done = await new.fetchval(
                    "SELECT count(*) FROM workflows WHERE status = 'succeeded'"
                )
                return bool(done == TOTAL + 1)

            await eventually(all_done, timeout=GUARD, what="every workflow to succeed")
            reconnected = time.monotonic() - promoted_at
            for n, handle in enumerate(handles):
                assert await handle.output() == 3 * n + 3
            # Each workflow ended once: one attempt, settled once, as succeeded.
            attempts = await new.fetch(
                "SELECT workflow_id, count(*) AS n, "
                "count(*) FILTER (WHERE outcome = 'succeeded') AS won "
                "FROM workflow_attempts GROUP BY workflow_id"
            )
            assert len(attempts) == TOTAL + 1
            assert all(row["won"] == 1 for row in attempts), "each workflow succeeded once"
            # Nothing committed on the old primary was lost.
            after = {
                row["id"]: row["output"]
                for row in await new.fetch(
                    "SELECT id, output FROM workflows WHERE id = ANY($1::text[])", list(settled)
                )
            }
            assert after == settled, "every workflow settled before the switch is still settled"
            steps = {
                (row["workflow_id"], row["step_index"]): row["output"]
                for row in await new.fetch(
                    "SELECT workflow_id, step_index, output FROM workflow_steps "
                    "WHERE status = 'succeeded'"
                )
            }
            assert all(steps.get(key) == output for key, output in recorded.items())
            # ... nor run again: no step whose output was recorded before the switch ran
            # after it.
            rerun = await new.fetch(
                "SELECT workflow_id, step FROM step_runs WHERE at > $1", switch_at
            )
            recorded_steps = {(wf, f"hop{index}") for wf, index in recorded}
            again = [(r["workflow_id"], r["step"]) for r in rerun]
            assert not [key for key in again if key in recorded_steps], "a recorded step re-ran"
            # Every step of every workflow ran.
            ran = await new.fetchval("SELECT count(DISTINCT (workflow_id, step)) FROM step_runs")
            assert ran == (TOTAL + 1) * 3
        finally:
            await new.close()

        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(timeout=GUARD) == 0
        for proc in procs:
            log = workers.log(proc)
            lines = log.splitlines()
            # One line when the database went away, one when the worker reached it again.
            assert len([line for line in lines if " is unreachable (" in line]) == 1, log
            assert len([line for line in lines if " is reachable again after " in line]) == 1, log
            assert "Traceback" not in log, log
        print(f"all {TOTAL} workflows settled {reconnected:.1f}s after the promotion")
    finally:
        workers.stop_all()
        await dashboard.aclose()
        await store.close()
