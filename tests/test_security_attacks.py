"""The third security review's attacks that need no browser (issue 37), each on the real
command, a real database or a real log handler; the dashboard's are in
``tests/test_dashboard_attacks.py``. Each test names the defect it attacks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    WorkflowConfig,
    WorkflowStatus,
    recv,
    send,
    set_attributes,
    workflow,
)
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from durable_mysql import MySQLStore
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.conftest import POSTGRES_URL, migrated_postgres_database, migrated_sqlite_url
from tests.raw_sql import fetch

ROOT = Path(__file__).resolve().parents[1]
FAST = WorkflowConfig(retry_backoff_secs=0)


@dataclass
class Opened:
    store: Store
    url: str


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
async def any_store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mysql_url: str,
) -> AsyncIterator[Opened]:
    """An open store with the schema applied, on each of the three backends, and its URL."""
    store: Store
    if request.param == "sqlite":
        url = await migrated_sqlite_url(tmp_path / "durable.db", tmp_path_factory)
        store = SQLiteStore(url)
    elif request.param == "postgresql":
        base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
        url = await migrated_postgres_database(POSTGRES_URL, f"{base}_attacks")
        store = PostgresStore(url)
    else:
        url = mysql_url
        store = MySQLStore(url)
    await store.open()
    try:
        yield Opened(store, url)
    finally:
        await store.close()


# -- 11: a body forging the library's own messages ---------------------------------------------


@workflow
async def waits_for_anything() -> Any:
    return await recv("orders", timeout=3600)


@workflow(max_attempts=3)
async def forges_a_cancel(target: str) -> None:
    await send(target, "stop", topic="durable.cancel")


async def test_11_a_body_cannot_send_on_a_reserved_topic(any_store: Opened) -> None:
    """``send(..., topic="durable.cancel")`` from a body is refused as a caller's is, before
    anything is written, and the body fails at once (bad input is not retried); the store's
    own ``send`` refuses it too."""
    store = any_store.store
    client = DurableClient(store)
    target = await client.start_workflow(waits_for_anything)
    forger = await client.start_workflow(forges_a_cancel, target.id)
    runner = WorkflowRunner(store, FAST)
    assert await runner.run_until_complete(forger) is WorkflowStatus.FAILED
    record = await client.get(forger.id)
    error = await forger.error()
    assert error is not None and error["type"] == "durable_core.errors.ConfigurationError"
    assert "topic 'durable.cancel' is reserved" in error["message"]
    assert record.attempts == 1
    with pytest.raises(ConfigurationError, match="is reserved"):
        await store.send(target.id, "durable.cancel", '"stop"', "forged-1")
    sent = "SELECT topic FROM workflow_messages WHERE workflow_id = :id"
    assert await fetch(any_store.url, sent, {"id": target.id}) == []


# -- 12: a NUL in an attribute value -----------------------------------------------------------


@workflow(max_attempts=3)
async def tags_with_a_nul() -> str:
    await set_attributes(customer="acme\x00corp")
    return "tagged"


async def test_12_a_nul_in_an_attribute_is_bad_input_on_every_backend(
    any_store: Opened,
) -> None:
    """From a caller: a :class:`ConfigurationError` naming the attribute, not a driver's
    error; from a body: the workflow fails on its first attempt (never retried as if the
    database were down); nothing is written."""
    store = any_store.store
    client = DurableClient(store)
    handle = await client.start_workflow(tags_with_a_nul)
    with pytest.raises(ConfigurationError, match="attribute 'customer' holds a NUL"):
        await client.set_attributes(handle.id, customer="a\x00b")
    with pytest.raises(ConfigurationError, match="NUL"):
        await client.list_workflows(attributes={"customer": "a\x00b"})
    with pytest.raises(ConfigurationError, match="lone surrogate"):
        await client.set_attributes(handle.id, customer="a\ud800b")
    assert await WorkflowRunner(store, FAST).run_until_complete(handle) is (WorkflowStatus.FAILED)
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.ConfigurationError"
    assert (await client.get(handle.id)).attempts == 1
    rows = "SELECT name FROM workflow_attributes WHERE workflow_id = :id"
    assert await fetch(any_store.url, rows, {"id": handle.id}) == []


@workflow(max_attempts=3)
async def sends_with_a_nul_key(target: str) -> None:
    await send(target, "hello", topic="orders", idempotency_key="key\x00")


async def test_12_a_value_the_database_refuses_is_not_retried(
    postgres_url: str,
) -> None:
    """A value only the database refuses (PostgreSQL's text holds no NUL: here an
    idempotency key) is a :class:`ConfigurationError` from the SQL layer, not a
    ``StoreError`` a body retries."""
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    store = PostgresStore(await migrated_postgres_database(POSTGRES_URL, f"{base}_refused"))
    async with store:
        client = DurableClient(store)
        target = await client.start_workflow(waits_for_anything)
        with pytest.raises(ConfigurationError, match="the database refused a value"):
            await store.send(target.id, "orders", '"x"', "key\x00")
        sender = await client.start_workflow(sends_with_a_nul_key, target.id)
        assert await WorkflowRunner(store, FAST).run_until_complete(sender) is (
            WorkflowStatus.FAILED
        )
        error = await sender.error()
        assert error is not None and error["type"] == "durable_core.errors.ConfigurationError"
        assert (await client.get(sender.id)).attempts == 1
