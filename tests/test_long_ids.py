"""Ids users choose: a 255-character workflow id on every backend (schema 7).

One id of 255 characters goes through a start, a claim (a worker's on PostgreSQL, the
only backend a worker claims from; the in-process runner's elsewhere), a child started under
another id of 255 characters (which the parent waits for), a message and the dashboard's
workflow page, on SQLite, PostgreSQL and MariaDB; an id of 256 characters is refused
with an error that says why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

import durable_core
from durable_core import (
    DurableClient,
    WorkflowConfig,
    WorkflowStatus,
    open_store,
    recv,
    workflow,
    workflow_step,
)
from durable_core.caller.client import MAX_ID_LENGTH
from durable_core.dashboard import create_app
from durable_core.errors import ConfigurationError
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.store import Claimer, Store
from durable_core.testing import WorkflowRunner
from tests.conftest import (
    MYSQL_URL,
    POSTGRES_URL,
    drop_postgres_database,
    empty_mysql_database,
    fresh_postgres_database,
)

PARENT = "order-" + "p" * (MAX_ID_LENGTH - len("order-"))
CHILD = "order-" + "c" * (MAX_ID_LENGTH - len("order-"))


@workflow_step
async def shout(text: str) -> str:
    return text.upper()


@workflow
async def child_flow(text: str) -> str:
    return await shout(text)


@workflow
async def parent_flow(text: str) -> str:
    child = await durable_core.start_workflow_with_id(CHILD, child_flow, text)
    told = await recv("go")
    return f"{await child.output()} {told}"


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_url: str, mysql_url: str
) -> AsyncIterator[Store]:
    """A fresh database of each backend at the latest schema."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'long.db'}"
    elif request.param == "postgresql":
        base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
        url = await fresh_postgres_database(POSTGRES_URL, f"{base}_long_ids")
    else:
        base = MYSQL_URL.rsplit("/", 1)[-1].split("?")[0]
        url = await empty_mysql_database(f"{base}_long_ids")
    opened = await open_store(url)
    try:
        await opened.apply_schema()
        yield opened
    finally:
        await opened.close()
        if request.param == "postgresql":
            await drop_postgres_database(url)


async def test_a_255_character_id_goes_through_every_path(store: Store) -> None:
    assert len(PARENT) == len(CHILD) == 255
    client = DurableClient(store)
    handle = await client.start_workflow_with_id(PARENT, parent_flow, "shipped")
    assert handle.id == PARENT
    if isinstance(store, Claimer):  # PostgreSQL: a worker claims it
        config = WorkflowConfig(poll_interval_ms=20, retry_backoff_secs=0, concurrency=2)
        worker = WorkflowWorker(store, config, worker_id="long-ids")
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            with anyio.fail_after(60):
                while (await client.get(PARENT)).status is not WorkflowStatus.WAITING:  # noqa: ASYNC110 (a row in the database)
                    await anyio.sleep(0.02)
                await client.send(PARENT, "and paid", topic="go")
                assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
            worker.stop()
    else:  # SQLite, MySQL: no worker claims there; the runner acquires each row
        runner = WorkflowRunner(store)
        assert await runner.run_once(PARENT) is WorkflowStatus.WAITING
        assert await runner.run_until_complete(CHILD) is WorkflowStatus.SUCCEEDED
        await client.send(PARENT, "and paid", topic="go")
        assert await runner.run_until_complete(PARENT) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "SHIPPED and paid"
    child = await client.get(CHILD)
    assert (child.status, child.parent_id, child.attempts) == (WorkflowStatus.SUCCEEDED, PARENT, 1)
    assert (await client.get(PARENT)).attempts >= 1

    app = create_app(client, allowed_hosts=["testserver"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        page = await http.get(f"/workflows/{PARENT}")
        assert page.status_code == 200
        assert PARENT in page.text and CHILD in page.text
        child_page = await http.get(f"/workflows/{CHILD}")
        assert child_page.status_code == 200 and PARENT in child_page.text


async def test_an_id_of_256_characters_is_refused(sqlite_store: Store) -> None:
    with pytest.raises(ConfigurationError, match="1 to 255 characters"):
        await DurableClient(sqlite_store).start_workflow_with_id("x" * 256, child_flow, "too long")
