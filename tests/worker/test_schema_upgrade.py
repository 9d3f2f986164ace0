"""A PostgreSQL database made by release 0.1, upgraded by ``durable migrate`` and then drained.

The release-0.1 tables and rows (``tests/release_0_1.py``) are migrated in
place by the CLI; every row reads back unchanged; then a real worker process
runs the two pending workflows to the end, the retried one from its cached
first step (counted in the ``step_runs`` side table).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator

import asyncpg
import pytest

from durable_core.sql.schema import SCHEMA_VERSION
from tests import release_0_1
from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.worker import app
from tests.worker.conftest import ROOT, Workers, eventually

DATABASE = "durable_upgrade_test"
DATA = release_0_1.rows(app.three_steps.name, (app.first.name, app.second.name, app.third.name))


@pytest.fixture
async def release_0_1_url(postgres_url: str) -> AsyncIterator[str]:
    url = await fresh_postgres_database(postgres_url, DATABASE)
    await release_0_1.create(url.replace("postgresql://", "postgresql+asyncpg://"), DATA)
    db = await asyncpg.connect(url)
    try:
        await db.execute(app.SIDE_TABLE_DDL)
    finally:
        await db.close()
    yield url
    await drop_postgres_database(url)


async def test_release_0_1_rows_survive_durable_migrate_and_a_worker_drains_them(
    release_0_1_url: str, workers: Workers
) -> None:
    async_url = release_0_1_url.replace("postgresql://", "postgresql+asyncpg://")
    done = subprocess.run(
        [sys.executable, "-m", "durable_core", "migrate", "--database-url", release_0_1_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert await release_0_1.read(async_url) == release_0_1.sort(DATA)

    workers.url = release_0_1_url
    workers.start()
    db = await asyncpg.connect(release_0_1_url)
    try:

        async def drained() -> bool:
            pending = await db.fetchval(
                "SELECT count(*) FROM workflows WHERE status NOT IN "
                "('succeeded', 'failed', 'cancelled')"
            )
            return bool(pending == 0)

        await eventually(drained, timeout=60, what="the pending release-0.1 workflows to finish")
        rows = await db.fetch("SELECT id, status, output, attempts FROM workflows ORDER BY id")
        assert [(r["id"], r["status"], r["output"], r["attempts"]) for r in rows] == [
            ("v1-cancelled", "cancelled", None, 1),
            ("v1-failed", "failed", None, 3),
            ("v1-fresh", "succeeded", "9", 1),
            ("v1-retrying", "succeeded", "7", 2),
            ("v1-succeeded", "succeeded", "1", 1),
        ]
        runs = await db.fetch(
            "SELECT workflow_id, step, count(*) AS n FROM step_runs "
            "GROUP BY workflow_id, step ORDER BY workflow_id, step"
        )
        assert [(r["workflow_id"], r["step"], r["n"]) for r in runs] == [
            ("v1-fresh", "first", 1),
            ("v1-fresh", "second", 1),
            ("v1-fresh", "third", 1),
            # The first step of the retried workflow came from its release-0.1 cache.
            ("v1-retrying", "second", 1),
            ("v1-retrying", "third", 1),
        ]
        assert await db.fetchval("SELECT max(version) FROM durable_schema_versions") == (
            SCHEMA_VERSION
        )
    finally:
        await db.close()
