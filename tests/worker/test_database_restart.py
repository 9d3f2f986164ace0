"""PostgreSQL restarted under load: workers carry on and every workflow completes.

The restart happens on a cluster of its own, so the rest of the suite keeps its
server: Debian's ``pg_createcluster`` makes it on a free port when the session
first needs it, and it is stopped and dropped when the session ends. A cluster
left by a run that crashed (its pytest process is gone) is dropped first.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from durable_core import DurableClient
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from tests.worker import app, clusters
from tests.worker.clusters import Cluster
from tests.worker.conftest import Workers, eventually

CLUSTER_PREFIX = "durable_restart"


@pytest.fixture(scope="session")
def restart_cluster(request: pytest.FixtureRequest) -> Cluster:
    """A cluster of this session's own (named after its pid), dropped when the session ends."""
    clusters.drop_leftovers(CLUSTER_PREFIX)
    cluster = Cluster(f"{CLUSTER_PREFIX}_{os.getpid()}", clusters.free_port())
    # Registered first: a half-made cluster is dropped too.
    request.addfinalizer(cluster.drop_if_there)
    cluster.create()
    return cluster


@pytest.fixture
async def restartable(restart_cluster: Cluster) -> AsyncIterator[str]:
    """The URL of the session's own cluster, running, on empty tables."""
    if clusters.clusters().get(restart_cluster.name) != "online":
        restart_cluster.ctl("start")
    conn = await asyncpg.connect(restart_cluster.url, timeout=30)
    try:
        await conn.execute(
            f"DROP TABLE IF EXISTS {WORKFLOW_TABLES}, durable_schema_versions, step_runs"
        )
        await conn.execute(app.SIDE_TABLE_DDL)
    finally:
        await conn.close()
    yield restart_cluster.url


async def test_workers_survive_a_postgres_restart_under_load(
    restart_cluster: Cluster, restartable: str, tmp_path: Path
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

        async def both_started() -> bool:
            return all("started: concurrency" in workers.log(proc) for proc in procs)

        # Both are running when the database restarts (a fast worker can settle a quarter of
        # the backlog before the other has booted, and a boot the restart interrupts fails).
        await eventually(both_started, timeout=120, what="both workers to start")

        async def some_done() -> bool:
            done: int = await sql.fetchval(
                "SELECT count(*) FROM workflows WHERE status = 'succeeded'"
            )
            return done >= total // 4

        await eventually(some_done, timeout=120, what="a quarter of the workflows to succeed")
        settled_before = {
            row["id"]: row["n"]
            for row in await sql.fetch(
                "SELECT w.id, count(s.*) AS n FROM workflows w JOIN step_runs s "
                "ON s.workflow_id = w.id WHERE w.status = 'succeeded' GROUP BY w.id"
            )
        }
        await sql.close()
        restart_cluster.ctl("restart", "-m", "fast")
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
        assert "is unreachable" in log, "the restart was felt by the workers"
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    finally:
        workers.stop_all()
        await store.close()
