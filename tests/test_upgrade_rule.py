"""The rolling-upgrade rule: schema changes are additive within a release line, ``durable
migrate --check`` tells a deploy pipeline whether to migrate, ``durable migrate`` says when
a pending version is not additive, and a worker meets a newer schema with one line."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa
from alembic.operations import ops

from durable_core import DurableClient, WorkflowStatus
from durable_core.cli.running import migration_state, not_additive
from durable_core.durations import utcnow
from durable_core.errors import SchemaTooNewError
from durable_core.sql import migrations
from durable_core.sql.schema import SCHEMA_VERSION, schema_versions
from durable_core.sql.schema_history import VERSIONS, SchemaVersion
from durable_core.sql.schema_ops import NOT_ADDITIVE
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.conftest import drop_postgres_database, migrated_postgres_database
from tests.test_cli import bare, one_line_error
from tests.worker import app
from tests.worker.conftest import eventually

ROOT = Path(__file__).resolve().parents[1]

_ADDITIVE = (
    ops.CreateTableOp,
    ops.CreateIndexOp,
    ops.AddColumnOp,
    ops.AlterColumnOp,
    ops.DropIndexOp,
    ops.DropConstraintOp,
    ops.CreateForeignKeyOp,
)


def test_every_version_called_additive_only_adds() -> None:
    """A version marked additive adds tables, indexes and columns an older worker's writes
    need not fill (nullable or defaulted), widens columns and re-makes keys and indexes;
    it drops no table or column."""
    for version in VERSIONS:
        if not version.additive:
            continue
        for op in version.operations():
            assert isinstance(op, _ADDITIVE), f"version {version.number}: {op!r}"
            if isinstance(op, ops.AddColumnOp):
                column = op.column
                filled = column.nullable or column.server_default is not None
                assert filled, f"version {version.number}: {column.name} needs a value"
            if isinstance(op, ops.AlterColumnOp):
                assert op.modify_type is not None and op.modify_nullable is None
                assert op.modify_name is None, f"version {version.number} renames"


def _at_version(url: str, version: int) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        migrations.upgrade(conn, target=version)
    engine.dispose()


def test_migrate_check_exits_1_when_pending_0_when_current_and_2_on_errors(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    empty = bare("migrate", "--check", "--database-url", url)
    assert empty.returncode == 1 and "no durable tables" in empty.stdout, empty
    _at_version(url, SCHEMA_VERSION - 1)
    behind = bare("migrate", "--check", "--database-url", url)
    assert behind.returncode == 1, behind
    latest = VERSIONS[-1]
    assert f"1 migration pending ({latest.number}: {latest.message} (additive))" in behind.stdout
    assert bare("migrate", "--database-url", url).returncode == 0
    current = bare("migrate", "--check", "--database-url", url)
    assert current.returncode == 0 and "up to date" in current.stdout, current
    one_line_error(
        bare("migrate", "--check", "--database-url", "postgresql://postgres@127.0.0.1:1/x"),
        "database unavailable",
    )


def test_what_migrate_says_of_pending_versions() -> None:
    breaking = SchemaVersion(99, "durable_schema_v99", "a column dropped", list, additive=False)
    text = migration_state("SQLite database x", 98, [breaking])
    assert "1 migration pending (99: a column dropped (NOT additive))" in text
    [note] = not_additive([*VERSIONS[-2:], breaking])
    assert note.startswith("durable migrate: version 99 (a column dropped) is not additive")
    assert not_additive(list(VERSIONS)) == []
    newer = migration_state("SQLite database x", SCHEMA_VERSION + 1, [])
    assert "newer than this release's" in newer and "nothing to migrate" in newer
    assert migrations.pending(SCHEMA_VERSION) == []
    assert migrations.pending(SCHEMA_VERSION - 2) == list(VERSIONS[-2:])


def _record_newer(url: str, number: int, description: str) -> None:
    """Record versions past this release's, as the newer release that applied them does."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            schema_versions.insert(),
            {"version": number, "description": description, "applied_at": utcnow()},
        )
    engine.dispose()


async def test_a_store_on_a_newer_schema_says_so_and_refuses_one_that_is_not_additive(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'n.db'}"
    async with SQLiteStore(url) as store:
        await store.apply_schema()
        _record_newer(url, SCHEMA_VERSION + 1, "retention: a table of policies")
        with caplog.at_level(logging.WARNING, logger="durable_core.store"):
            await store.check_schema()
        [line] = [r.getMessage() for r in caplog.records if r.name == "durable_core.store"]
        assert f"schema version {SCHEMA_VERSION + 1}, migrated by a newer release" in line
        assert "additive, so this release runs on it" in line
        _record_newer(url, SCHEMA_VERSION + 2, f"{NOT_ADDITIVE}the input column dropped")
        with pytest.raises(SchemaTooNewError, match="the input column dropped") as refused:
            await store.check_schema()
        assert f"version {SCHEMA_VERSION + 2}" in str(refused.value)


async def test_a_worker_on_a_newer_schema_runs_when_it_is_additive_and_refuses_when_not(
    postgres_url: str, tmp_path: Path
) -> None:
    stem = postgres_url.rsplit("/", 1)[1].split("?")[0]
    url = await migrated_postgres_database(postgres_url, f"{stem}_newer")
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    command = [sys.executable, "-m", "durable_core", "worker", "--app", "tests.worker.app"]
    command += ["--bootstrap", "tests.worker.app:bootstrap"]
    env = {**os.environ, "DURABLE_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    record = "INSERT INTO durable_schema_versions VALUES ($1, $2, now())"
    try:
        await conn.execute(app.SIDE_TABLE_DDL)
        await conn.execute(record, SCHEMA_VERSION + 1, "retention: a table of policies")
        log_path = tmp_path / "worker.log"
        with log_path.open("wb") as log:
            worker = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log)
        try:

            async def started() -> bool:
                return "started: concurrency" in log_path.read_text()

            await eventually(started, timeout=120, what="the worker to start")
            async with PostgresStore(url) as store:
                handle = await DurableClient(store).start_workflow(app.three_steps, 4)
                assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
                assert await handle.output() == 7
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=120) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=120)
        newer = [line for line in log_path.read_text().splitlines() if "newer release" in line]
        assert len(newer) == 1 and "this release runs on it" in newer[0], newer
        await conn.execute(record, SCHEMA_VERSION + 2, f"{NOT_ADDITIVE}the input column dropped")
        refused = subprocess.run(
            command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        one_line_error(refused, f"version {SCHEMA_VERSION + 2} (the input column dropped) is not")
    finally:
        await conn.close()
        await drop_postgres_database(url)
