"""The embedded PostgreSQL (pgserver): fresh start, restart on existing data, clean stop."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg
import pytest

from durable_core.definitions.queues import Queue, Route
from durable_core.errors import StoreError, StoreUnavailableError
from durable_core.seams.plugins import plugin_manager
from durable_core.seams.records import NewWorkflow, Settlement, WorkflowStatus
from durable_postgres import EmbeddedPostgres, PostgresStore

ROUTES = [Route(Queue("default"), ("tests.flow",), 1000)]
"""Every row these tests claim."""

pytestmark = pytest.mark.anyio


async def test_start_apply_schema_stop_and_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    embedded = EmbeddedPostgres(data_dir)
    with pytest.raises(StoreError, match="not started"):
        embedded.url  # noqa: B018
    url = await embedded.start()
    try:
        assert embedded.running
        assert (data_dir / "PG_VERSION").exists()
        assert url.startswith("postgresql://postgres@/postgres?host=")
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT current_setting('server_version_num')::int") >= 15
        finally:
            await conn.close()
        async with PostgresStore(url) as store:
            await store.apply_schema()
            row = NewWorkflow(id="kept", name="tests.flow", input=json.dumps([1]), max_attempts=2)
            await store.enqueue([row])
            claimed = await store.claim(worker_id="w", limit=5, lease_seconds=30, routes=ROUTES)
            assert [c.id for c in claimed] == ["kept"]
            await store.settle(
                Settlement(claimed[0].lease, WorkflowStatus.SUCCEEDED, output='"done"')
            )
    finally:
        await embedded.stop()
    assert not embedded.running
    assert not (data_dir / "postmaster.pid").exists()
    with pytest.raises(StoreUnavailableError):
        await PostgresStore(url).open()

    # Same folder again: no initdb, the data is still there.
    async with EmbeddedPostgres(data_dir) as again, PostgresStore(again.url) as store:
        assert again.url == url
        record = await store.get_workflow("kept")
        assert record is not None
        assert (record.status, record.output) == (WorkflowStatus.SUCCEEDED, '"done"')
    assert not (data_dir / "postmaster.pid").exists()


async def test_default_folder_and_named_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    embedded = EmbeddedPostgres(database="durable")
    assert embedded.data_dir == tmp_path / ".durable" / "pgdata"
    async with embedded:
        assert (tmp_path / ".durable" / "pgdata" / "PG_VERSION").exists()
        assert "/durable?host=" in embedded.url
        conn = await asyncpg.connect(embedded.url)
        try:
            assert await conn.fetchval("SELECT current_database()") == "durable"
        finally:
            await conn.close()
    assert not (tmp_path / ".durable" / "pgdata" / "postmaster.pid").exists()


async def test_two_users_of_one_folder_stop_it_once(tmp_path: Path) -> None:
    first = EmbeddedPostgres(tmp_path / "pgdata")
    second = EmbeddedPostgres(tmp_path / "pgdata")
    url = await first.start()
    assert await second.start() == url
    await first.stop()
    conn = await asyncpg.connect(url)  # still serving the second user
    await conn.close()
    second.stop_blocking()
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists()


def test_the_plugin_offers_the_embedded_database(tmp_path: Path) -> None:
    hook = plugin_manager().hook.durable_embedded_database
    embedded = hook(data_dir=str(tmp_path / "pgdata"))
    assert isinstance(embedded, EmbeddedPostgres)
    assert embedded.data_dir == tmp_path / "pgdata"
    assert not embedded.running
