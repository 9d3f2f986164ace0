"""PostgreSQL restarted under load: workers carry on and every workflow completes.

The restart happens on a cluster of its own (port 5433, created on first use
with Debian's pg_createcluster) so the rest of the suite keeps its server.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from durable_core import DurableClient
from durable_core.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually

PORT = int(os.environ.get("DURABLE_TEST_RESTART_PORT", "5433"))
CLUSTER = "durable_restart"
URL = f"postgresql://postgres@127.0.0.1:{PORT}/postgres"


def _version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


def _ctl(*args: str) -> None:
    subprocess.run(["pg_ctlcluster", _version(), CLUSTER, *args], check=True, timeout=120)


def _cluster_status() -> str | None:
    listing = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True)
    for line in listing.stdout.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1] == CLUSTER:
            return parts[3]
    return None


@pytest.fixture
async def restartable() -> AsyncIterator[str]:
    if _cluster_status() is None:
        subprocess.run(
            ["pg_createcluster", _version(), CLUSTER, "-p", str(PORT), "--", "--auth=trust"],
            check=True,
            capture_output=True,
            timeout=120,
        )
    if _cluster_status() != "online":
        _ctl("start")
    conn = await asyncpg.connect(URL, timeout=30)
    try:
        await conn.execute(
            f"DROP TABLE IF EXISTS {WORKFLOW_TABLES}, durable_schema_versions, step_runs"
        )
        await conn.execute(app.SIDE_TABLE_DDL)
    finally:
        await conn.close()
    yield URL


async def test_workers_survive_a_postgres_restart_under_load(
    restartable: str, tmp_path: Path
) -> None:
    store = PostgresStore(restartable)
    await store.open()
    await store.apply_schema()
    workers = Workers(restartable, tmp_path)
    total = 300
    try:
        handles = await DurableClient(store).start_workflows(
            app.three_steps, [(n,) for n in range(total)]
        )
        procs = [
            workers.start(WORKFLOW_CONCURRENCY=8, WORKFLOW_LOCK_TIMEOUT_SECS=5) for _ in range(2)
        ]
        sql = await asyncpg.connect(restartable)

        async def some_done() -> bool:
            return (
                await sql.fetchval("SELECT count(*) FROM workflows WHERE status = 'succeeded'")
                >= total // 4
            )

        await eventually(some_done, timeout=120, what="a quarter of the workflows to succeed")
        settled_before = {
            row["id"]: row["n"]
            for row in await sql.fetch(
                "SELECT w.id, count(s.*) AS n FROM workflows w JOIN step_runs s "
                "ON s.workflow_id = w.id WHERE w.status = 'succeeded' GROUP BY w.id"
            )
        }
        await sql.close()
        _ctl("restart", "-m", "fast")
        sql = await asyncpg.connect(restartable, timeout=30)
        try:

            async def all_done() -> bool:
                try:
                    probe = await asyncpg.connect(restartable, timeout=10)
                except (asyncpg.PostgresError, OSError):
                    return False
                try:
                    done = await probe.fetchval(
                        "SELECT count(*) FROM workflows WHERE status = 'succeeded'"
                    )
                finally:
                    await probe.close()
                return bool(done == total)

            await eventually(all_done, timeout=180, what="every workflow to succeed", interval=0.2)
            async with PostgresStore(restartable) as fresh:
                for n, handle in enumerate(handles[:20]):
                    assert await fresh.get_workflow(handle.id) is not None
                    assert await DurableClient(fresh).handle(handle.id).output() == (n + 1) * 2 - 3
            runs = {
                (row["workflow_id"], row["step"]): row["n"]
                for row in await sql.fetch(
                    "SELECT workflow_id, step, count(*) AS n FROM step_runs "
                    "GROUP BY workflow_id, step"
                )
            }
            assert len(runs) == total * 3, "every step of every workflow ran"
            after = {
                row["workflow_id"]: row["n"]
                for row in await sql.fetch(
                    "SELECT workflow_id, count(*) AS n FROM step_runs GROUP BY workflow_id"
                )
            }
            for workflow_id, count in settled_before.items():
                assert after[workflow_id] == count, "settled work was not run again"
        finally:
            await sql.close()
        log = "".join(workers.log(p) for p in procs)
        assert "unavailable" in log, "the restart was felt by the workers"
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    finally:
        workers.stop_all()
        await store.close()
