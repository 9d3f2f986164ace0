"""A database made by release 0.1 is upgraded in place by ``durable migrate``, every row kept.

On SQLite and MariaDB: the release-0.1 tables and rows (``tests/release_0_1.py``)
are migrated by the CLI, every row reads back unchanged, and the pending
workflows then run to the end from their cached steps. The same on PostgreSQL,
drained by a real worker, is in ``tests/worker/test_schema_upgrade.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import durable_core
from durable_core import DurableClient, WorkflowStatus, open_store, workflow, workflow_step
from durable_core.errors import SchemaOutdatedError
from durable_core.schema import SCHEMA_VERSION
from durable_core.testing import WorkflowRunner
from tests import release_0_1
from tests.conftest import empty_mysql_database
from tests.side_effects import effect

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


@workflow_step
async def add_one(n: int) -> int:
    effect(f"add_one:{n}")
    return n + 1


@workflow_step
async def double(n: int) -> int:
    effect(f"double:{n}")
    return n * 2


@workflow_step
async def minus_three(n: int) -> int:
    effect(f"minus_three:{n}")
    return n - 3


@workflow
async def upgraded_flow(n: int) -> int:
    return await minus_three(await double(await add_one(n)))


DATA = release_0_1.rows(upgraded_flow.name, (add_one.name, double.name, minus_three.name))


def migrate(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", "migrate", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@workflow
async def naps_after_upgrade(n: int) -> int:
    await durable_core.sleep(timedelta(days=1))
    return await add_one(n)


async def upgrade_and_drain(
    url: str, async_url: str, effects: Callable[[str], int], made_at: int = 1
) -> None:
    await release_0_1.create(async_url, DATA, made_at)
    store = await open_store(url)
    try:
        with pytest.raises(SchemaOutdatedError, match=rf"version {made_at}.*durable migrate"):
            await store.check_schema()
    finally:
        await store.close()

    done = migrate(url)
    assert done.returncode == 0, done.stderr
    assert f"schema at version {SCHEMA_VERSION}" in done.stdout
    assert await release_0_1.read(async_url) == release_0_1.sort(DATA), "every row kept as it was"
    again = migrate(url)  # idempotent
    assert again.returncode == 0, again.stderr
    assert await release_0_1.read(async_url) == release_0_1.sort(DATA)

    store = await open_store(url)
    try:
        await store.check_schema()
        runner = WorkflowRunner(store)
        for workflow_id, expected in (("v1-retrying", 7), ("v1-fresh", 9)):
            assert await runner.run_until_complete(workflow_id) is WorkflowStatus.SUCCEEDED
            record = await store.get_workflow(workflow_id)
            assert record is not None and record.output == str(expected)
        for workflow_id in ("v1-succeeded", "v1-failed", "v1-cancelled"):
            before = next(r for r in DATA["workflows"] if r["id"] == workflow_id)
            record = await store.get_workflow(workflow_id)
            assert record is not None and record.status.value == before["status"]
        # The upgraded tables hold what this release adds: a workflow that waits.
        napping = await DurableClient(store).start_workflow(naps_after_upgrade, 1)
        assert await runner.run_once(napping) is WorkflowStatus.WAITING
        assert await runner.run_until_complete(napping) is WorkflowStatus.SUCCEEDED
    finally:
        await store.close()
    # The retried workflow's first step came from its release-0.1 cache.
    assert effects("add_one:4") == 0
    assert (effects("double:5"), effects("minus_three:10")) == (1, 1)
    assert (effects("add_one:5"), effects("double:6"), effects("minus_three:12")) == (1, 1, 1)
    assert effects("add_one:1") == 1
    engine = create_async_engine(async_url)
    try:
        async with engine.connect() as conn:
            versions = await conn.execute(sa.text("SELECT version FROM durable_schema_versions"))
            assert sorted(v for (v,) in versions) == list(range(2, SCHEMA_VERSION + 1))
    finally:
        await engine.dispose()


async def test_a_release_0_1_sqlite_database_is_upgraded_in_place(
    tmp_path: Path, effects: Callable[[str], int]
) -> None:
    path = tmp_path / "release-0.1.db"
    await upgrade_and_drain(f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}", effects)


async def test_a_release_0_1_mariadb_database_is_upgraded_in_place(
    mysql_url: str, effects: Callable[[str], int]
) -> None:
    url = await empty_mysql_database("durable_upgrade_test")
    async_url = url.replace("mysql://", "mysql+aiomysql://", 1)
    await upgrade_and_drain(url, async_url, effects)


async def test_a_version_2_sqlite_database_is_upgraded_in_place(
    tmp_path: Path, effects: Callable[[str], int]
) -> None:
    """The release before this one made schema version 2."""
    path = tmp_path / "v2.db"
    await upgrade_and_drain(f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}", effects, 2)
