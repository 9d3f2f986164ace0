"""A database made by release 0.1 is upgraded in place by ``durable migrate``, every row kept.

On SQLite and MariaDB: the release-0.1 tables and rows (``tests/release_0_1.py``)
are migrated by the CLI, every row reads back unchanged, and the pending
workflows then run to the end from their cached steps. The same on PostgreSQL,
drained by a real worker, is in ``tests/worker/test_schema_upgrade.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import durable_core
from durable_core import DurableClient, WorkflowStatus, open_store, workflow, workflow_step
from durable_core.definitions.schedules import ScheduleRecord
from durable_core.errors import SchemaOutdatedError
from durable_core.seams.operators import WorkerRecord
from durable_core.seams.store import WorkerRegistry
from durable_core.sql import migrations
from durable_core.sql.schema import SCHEMA_VERSION, build_metadata
from durable_core.testing import WorkflowRunner
from tests import release_0_1
from tests.conftest import (
    MYSQL_URL,
    POSTGRES_URL,
    drop_postgres_database,
    empty_mysql_database,
    fresh_postgres_database,
)
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


@workflow
async def waits_for_go(n: int) -> int:
    first = await add_one(n)
    await durable_core.set_event("stage", "waiting")
    extra = await durable_core.recv("go")
    return await double(first + extra)


V3_TABLES = ("workflows", "workflow_steps", "workflow_messages", "workflow_events")
V3 = build_metadata(3)


async def rows_at(
    url: str, metadata: sa.MetaData, tables: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """Every row of ``tables`` as ``metadata`` (a past version's) has them, in key order."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            result = {}
            for name in tables:
                table = metadata.tables[name]
                rows = await conn.execute(sa.select(table).order_by(*table.primary_key.columns))
                result[name] = [dict(row._mapping) for row in rows]
            return result
    finally:
        await engine.dispose()


async def v3_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the version-3 tables (their version-3 columns), in key order."""
    return await rows_at(url, V3, V3_TABLES)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_version_3_database_with_a_waiting_workflow_is_upgraded_in_place(
    backend: str, tmp_path: Path, postgres_url: str, effects: Callable[[str], int]
) -> None:
    """The release before this one made schema version 3: a workflow waiting on a message,
    its event, the message already sent, all kept by ``durable migrate``; the workflow then
    runs to the end without repeating its first step, and lands in the default queue."""
    # The rows are made by this release's engine (on a scratch database), then copied into a
    # database made at version 3 (their columns are version 3's), as release 0.2 wrote them.
    scratch = f"sqlite:///{tmp_path / 'scratch.db'}"
    store = await open_store(scratch)
    try:
        await store.apply_schema()
        client = DurableClient(store)
        handle = await client.start_workflow_with_id("v3-waiting", waits_for_go, 4)
        assert await WorkflowRunner(store).run_once(handle) is WorkflowStatus.WAITING
        await client.send("v3-waiting", 10, topic="go")
    finally:
        await store.close()
    made = await v3_rows(f"sqlite+aiosqlite:///{tmp_path / 'scratch.db'}")
    assert [len(made[name]) for name in V3_TABLES] == [1, 3, 1, 1]

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'v3.db'}"
        async_url = f"sqlite+aiosqlite:///{tmp_path / 'v3.db'}"
    else:
        base = postgres_url.rsplit("/", 1)[-1].split("?")[0]
        url = await fresh_postgres_database(postgres_url, f"{base}_upgrade_v3")
        async_url = url.replace("postgresql://", "postgresql+asyncpg://", 1)
    engine = create_async_engine(async_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(migrations.upgrade, 3)
            for name in V3_TABLES:
                await conn.execute(V3.tables[name].insert(), made[name])
    finally:
        await engine.dispose()

    done = migrate(url)
    assert done.returncode == 0, done.stderr
    assert f"schema at version {SCHEMA_VERSION}" in done.stdout
    assert await v3_rows(async_url) == made, "every row kept as it was"

    store = await open_store(url)
    try:
        await store.check_schema()
        record = await store.get_workflow("v3-waiting")
        assert record is not None
        assert (record.queue, record.priority, record.headers) == ("default", 0, None)
        runner = WorkflowRunner(store)
        assert await runner.run_until_complete("v3-waiting") is WorkflowStatus.SUCCEEDED
        done_record = await store.get_workflow("v3-waiting")
        assert done_record is not None and done_record.output == str((4 + 1 + 10) * 2)
    finally:
        await store.close()
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert (effects("add_one:4"), effects("double:15")) == (1, 1)


FAILED_ONCE: set[int] = set()


@workflow_step
async def fails_once(n: int) -> int:
    effect(f"fails_once:{n}")
    if n not in FAILED_ONCE:
        FAILED_ONCE.add(n)
        raise RuntimeError(f"first try of {n} fails")
    return n * 10


@workflow
async def retried_across_upgrade(n: int) -> int:
    return await fails_once(await add_one(n))


V4_TABLES = (
    "workflows",
    "workflow_steps",
    "workflow_messages",
    "workflow_events",
    "workflow_attempts",
    "workflow_schedules",
)
V4 = build_metadata(4)


async def v4_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the version-4 tables (their version-4 columns), in key order."""
    return await rows_at(url, V4, V4_TABLES)


async def _database_at(backend: str, name: str, tmp_path: Path) -> tuple[str, str]:
    """An empty database ``name`` on ``backend``, named after the test database: its URL,
    and its SQLAlchemy async URL."""
    if backend == "sqlite":
        path = tmp_path / f"{name}.db"
        return f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
    if backend == "postgresql":
        base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
        url = await fresh_postgres_database(POSTGRES_URL, f"{base}_{name}")
        return url, url.replace("postgresql://", "postgresql+asyncpg://", 1)
    base = MYSQL_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await empty_mysql_database(f"{base}_{name}")
    return url, url.replace("mysql://", "mysql+aiomysql://", 1)


async def database_with_rows(
    backend: str,
    name: str,
    tmp_path: Path,
    metadata: sa.MetaData,
    version: int,
    tables: Sequence[str],
    made: Mapping[str, list[dict[str, Any]]],
) -> tuple[str, str]:
    """A database ``name`` on ``backend`` at schema ``version`` (whose tables ``metadata``
    describes) holding the rows ``made`` of ``tables`` as :func:`rows_at` read them: its
    URL and its SQLAlchemy async URL. Serial keys are left to the database, which counts
    them as the scratch database did."""
    url, async_url = await _database_at(backend, name, tmp_path)
    engine = create_async_engine(async_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(migrations.upgrade, version)
            for table in tables:
                rows = [{k: v for k, v in row.items() if k != "seq"} for row in made[table]]
                if rows:
                    await conn.execute(metadata.tables[table].insert(), rows)
    finally:
        await engine.dispose()
    return url, async_url


async def foreign_keys(async_url: str, tables: Sequence[str]) -> dict[str, list[Any]]:
    """The foreign keys of ``tables`` as the database reports them: per table, sorted
    (name, constrained columns, referred table, referred columns)."""
    engine = create_async_engine(async_url)
    try:
        async with engine.connect() as conn:

            def read(sync: sa.Connection) -> dict[str, list[Any]]:
                inspector = sa.inspect(sync)
                return {
                    table: sorted(
                        (
                            fk["name"] or "",
                            tuple(fk["constrained_columns"]),
                            fk["referred_table"],
                            tuple(fk["referred_columns"]),
                        )
                        for fk in inspector.get_foreign_keys(table)
                    )
                    for table in tables
                }

            return await conn.run_sync(read)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_4_database_is_upgraded_in_place(
    backend: str,
    tmp_path: Path,
    postgres_url: str,
    mysql_url: str,
    effects: Callable[[str], int],
) -> None:
    """The release before this one made schema version 4: a workflow waiting on a message
    (its steps, event and message), a workflow whose step failed and whose attempt was
    retried, and a schedule, all kept by ``durable migrate``; both workflows then run to the
    end without repeating a step that succeeded, and the new version's tables take rows."""
    # The rows are made by this release's engine (on a scratch database), then copied into a
    # database made at version 4 (their columns are version 4's), as release 0.3 wrote them.
    FAILED_ONCE.clear()
    scratch = f"sqlite:///{tmp_path / 'scratch.db'}"
    store = await open_store(scratch)
    try:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        waiting = await client.start_workflow_with_id("v4-waiting", waits_for_go, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        await client.send("v4-waiting", 10, topic="go")
        retrying = await client.start_workflow_with_id("v4-retrying", retried_across_upgrade, 1)
        assert await runner.run_once(retrying) is WorkflowStatus.PENDING
        now = datetime.now(UTC)
        schedule = ScheduleRecord(
            name="v4-nightly",
            workflow_name=upgraded_flow.name,
            cron="0 3 * * *",
            timezone="Europe/Paris",
            input='{"args":[1],"kwargs":{}}',
            queue=None,
            paused=True,
            catch_up=2,
            next_tick=now + timedelta(days=1),
            last_tick=None,
            created_at=now,
            updated_at=now,
        )
        assert await store.add_schedule(schedule)
        kept_schedule = await store.get_schedule("v4-nightly")
    finally:
        await store.close()
    made = await v4_rows(f"sqlite+aiosqlite:///{tmp_path / 'scratch.db'}")
    assert [len(made[name]) for name in V4_TABLES] == [2, 5, 1, 1, 1, 1]

    url, async_url = await database_with_rows(
        backend, "upgrade_v4", tmp_path, V4, 4, V4_TABLES, made
    )

    done = migrate(url)
    assert done.returncode == 0, done.stderr
    assert f"schema at version {SCHEMA_VERSION}" in done.stdout
    assert await v4_rows(async_url) == made, "every row kept as it was"
    again = migrate(url)  # idempotent
    assert again.returncode == 0, again.stderr
    assert await v4_rows(async_url) == made

    store = await open_store(url)
    try:
        await store.check_schema()
        assert await store.get_schedule("v4-nightly") == kept_schedule
        steps = await store.load_steps("v4-retrying")
        assert [(s.step_index, s.status.value, s.path) for s in steps] == [
            (0, "succeeded", None),
            (1, "failed", None),
        ]
        assert await store.load_step_tries("v4-retrying") == [], "no try was kept at version 4"
        runner = WorkflowRunner(store)
        for workflow_id, expected in (("v4-waiting", (4 + 1 + 10) * 2), ("v4-retrying", 20)):
            assert await runner.run_until_complete(workflow_id) is WorkflowStatus.SUCCEEDED
            record = await store.get_workflow(workflow_id)
            assert record is not None and record.output == str(expected)
        history = await store.load_attempts("v4-retrying")
        assert [a.outcome for a in history] == ["retry", "succeeded"]
        # The upgraded tables hold what this release adds: a failed try, kept.
        FAILED_ONCE.clear()
        fresh = await DurableClient(store).start_workflow(retried_across_upgrade, 7)
        assert await runner.run_until_complete(fresh) is WorkflowStatus.SUCCEEDED
        [kept] = await store.load_step_tries(fresh.id)
        assert (kept.step_index, kept.try_number) == (1, 1)
        assert kept.error is not None and "first try of 8 fails" in kept.error
    finally:
        await store.close()
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert (effects("add_one:4"), effects("double:15")) == (1, 1)
    assert (effects("add_one:1"), effects("fails_once:2")) == (1, 2)


V5_TABLES = (*V4_TABLES, "workflow_step_tries")
V5 = build_metadata(5)


async def v5_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the version-5 tables (their version-5 columns), in key order."""
    return await rows_at(url, V5, V5_TABLES)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_version_5_database_is_upgraded_in_place(
    backend: str,
    tmp_path: Path,
    postgres_url: str,
    mysql_url: str,
    effects: Callable[[str], int],
) -> None:
    """Schema version 6 adds the workers' table and an index on when workflows ended: a
    version-5 database (a waiting workflow, one whose step failed a try, a finished one, a
    schedule) keeps every row through ``durable migrate``; its workflows then run on, the
    activity of the last hour counts the one that had ended, and a worker can register."""
    FAILED_ONCE.clear()
    scratch = f"sqlite:///{tmp_path / 'scratch5.db'}"
    store = await open_store(scratch)
    try:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        waiting = await client.start_workflow_with_id("v5-waiting", waits_for_go, 4)
        assert await runner.run_once(waiting) is WorkflowStatus.WAITING
        await client.send("v5-waiting", 10, topic="go")
        retrying = await client.start_workflow_with_id("v5-retrying", retried_across_upgrade, 1)
        assert await runner.run_once(retrying) is WorkflowStatus.PENDING
        done = await client.start_workflow_with_id("v5-done", upgraded_flow, 2)
        assert await runner.run_until_complete(done) is WorkflowStatus.SUCCEEDED
        now = datetime.now(UTC)
        assert await store.add_schedule(
            ScheduleRecord(
                name="v5-nightly",
                workflow_name=upgraded_flow.name,
                cron="0 3 * * *",
                timezone="UTC",
                input='{"args":[1],"kwargs":{}}',
                queue="nightly",
                paused=False,
                catch_up=0,
                next_tick=now + timedelta(days=1),
                last_tick=None,
                created_at=now,
                updated_at=now,
            )
        )
    finally:
        await store.close()
    made = await v5_rows(f"sqlite+aiosqlite:///{tmp_path / 'scratch5.db'}")
    assert [len(made[name]) for name in V5_TABLES] == [3, 8, 1, 1, 2, 1, 1]

    url, async_url = await database_with_rows(
        backend, "upgrade_v5", tmp_path, V5, 5, V5_TABLES, made
    )

    migrated = migrate(url)
    assert migrated.returncode == 0, migrated.stderr
    assert f"schema at version {SCHEMA_VERSION}" in migrated.stdout
    assert await v5_rows(async_url) == made, "every row kept as it was"
    assert migrate(url).returncode == 0  # idempotent
    assert await v5_rows(async_url) == made

    store = await open_store(url)
    try:
        await store.check_schema()
        client = DurableClient(store)
        [day] = await client.activity(timedelta(days=1))
        assert (day.queue, day.created, day.ended) == ("default", 3, {"succeeded": 1})
        runner = WorkflowRunner(store)
        for workflow_id, expected in (("v5-waiting", (4 + 1 + 10) * 2), ("v5-retrying", 20)):
            assert await runner.run_until_complete(workflow_id) is WorkflowStatus.SUCCEEDED
            record = await store.get_workflow(workflow_id)
            assert record is not None and record.output == str(expected)
        [kept] = await store.load_step_tries("v5-retrying")
        assert (kept.step_index, kept.try_number) == (1, 1)
        # The new table takes a worker's row.
        assert isinstance(store, WorkerRegistry)
        worker = WorkerRecord(
            "w-1", "host", 1, 4, ("default",), (upgraded_flow.name,), 0, now, now, now
        )
        await store.beat_worker(worker, 60)
        assert [w.worker_id for w in await client.workers()] == ["w-1"]
    finally:
        await store.close()
        if backend == "postgresql":
            await drop_postgres_database(url)
    assert (effects("add_one:4"), effects("double:15")) == (1, 1)
