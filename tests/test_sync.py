"""``SyncClient``: the blocking API for sync code, on SQLite and PostgreSQL, from many threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from durable_core import (
    ConfigurationError,
    InvalidDatabaseURLError,
    WaitTimeoutError,
    WorkflowConflictError,
    WorkflowFailedError,
    WorkflowStart,
    WorkflowStatus,
    recv,
    set_event,
    workflow,
    workflow_step,
)
from durable_core.sync import SyncClient, SyncHandle
from durable_core.testing import WorkflowRunner
from tests.conftest import POSTGRES_URL, drop_postgres_database, fresh_postgres_database


@workflow_step
async def shout(text: str) -> str:
    return text.upper()


@workflow
async def greet(name: str, punctuation: str = "!") -> str:
    return await shout(name) + punctuation


@workflow
async def approval(request: str) -> str:
    await set_event("stage", "waiting for approval")
    decision = await recv("decision")
    return f"{request}: {decision}"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database with the schema applied."""
    if request.param == "sqlite":
        location = f"sqlite:///{tmp_path / 'durable.db'}"
    else:
        name = POSTGRES_URL.rsplit("/", 1)[1].split("?")[0]
        location = asyncio.run(fresh_postgres_database(POSTGRES_URL, f"{name}_sync"))
    with SyncClient(location) as client:
        client.apply_schema()
    yield location
    if request.param == "postgresql":
        asyncio.run(drop_postgres_database(location))


def run(client: SyncClient, handle: SyncHandle[object]) -> WorkflowStatus:
    """Run ``handle``'s workflow in-process, as a worker would."""
    return client.call(WorkflowRunner(client.store).run_until_complete, handle.id)


def test_start_wait_and_read_a_workflow(url: str) -> None:
    with SyncClient(url) as client:
        handle = client.start_workflow(greet, "ada", punctuation="?")
        assert handle.status() is WorkflowStatus.PENDING
        with pytest.raises(WaitTimeoutError):
            handle.wait(timeout=0.2)
        assert run(client, handle) is WorkflowStatus.SUCCEEDED
        assert handle.wait() is handle.wait(timeout=5) is WorkflowStatus.SUCCEEDED
        assert handle.output() == "ADA?"
        assert handle.output(str) == "ADA?"
        assert [s.step_name for s in handle.steps()] == [shout.name]
        assert handle.info().attempts == 1 and handle.error() is None
        assert client.handle(handle.id).output() == "ADA?"
        assert client.get(handle.id).status is WorkflowStatus.SUCCEEDED

        first = client.start_workflow_with_id("greet-bob", greet, "bob")
        again = client.start_workflow_with_id("greet-bob", greet, "bob")
        assert first.id == again.id == "greet-bob"
        with pytest.raises(WorkflowConflictError):
            client.start_workflow_with_id("greet-bob", greet, "eve")
        batch = client.start_workflows(
            greet, [("c",), {"name": "d"}, WorkflowStart(args=("e",), workflow_id="greet-e")]
        )
        assert [h.id for h in batch][2] == "greet-e"
        assert len(client.list_workflows(status="pending")) == 4


def test_events_messages_and_cancel(url: str) -> None:
    with SyncClient(url) as client:
        handle = client.start_workflow(approval, "laptop")
        runner = WorkflowRunner(client.store)
        assert client.call(runner.run_once, handle.id) is WorkflowStatus.WAITING
        assert handle.get_event("stage", timeout=5) == "waiting for approval"
        assert handle.get_event("nothing", timeout=0.1) is None
        client.send(handle.id, "approved", topic="decision", idempotency_key="d-1")
        client.send(handle.id, "refused", topic="decision", idempotency_key="d-1")  # dropped
        assert run(client, handle) is WorkflowStatus.SUCCEEDED
        assert handle.output() == "laptop: approved"

        doomed = client.start_workflow(approval, "phone")
        doomed.cancel()
        assert doomed.wait(timeout=5) is WorkflowStatus.CANCELLED
        with pytest.raises(WorkflowFailedError):
            doomed.output()


def test_eight_threads_share_one_client(url: str) -> None:
    threads, per_thread = 8, 10
    start = threading.Barrier(threads)
    with SyncClient(url) as client:

        def enqueue(n: int) -> list[str]:
            start.wait(timeout=30)
            handles = [client.start_workflow(greet, f"t{n}-{i}") for i in range(per_thread)]
            assert {h.status() for h in handles} == {WorkflowStatus.PENDING}
            return [h.id for h in handles]

        with ThreadPoolExecutor(threads) as pool:
            ids = [i for chunk in pool.map(enqueue, range(threads)) for i in chunk]
        assert len(set(ids)) == threads * per_thread
        assert len(client.list_workflows(limit=1000)) == threads * per_thread

        def collect(n: int) -> list[str]:
            start.wait(timeout=30)
            chunk = ids[n * per_thread : (n + 1) * per_thread]
            for workflow_id in chunk:
                assert client.handle(workflow_id).wait(timeout=60) is WorkflowStatus.SUCCEEDED
            return [client.handle(workflow_id).output() for workflow_id in chunk]

        with ThreadPoolExecutor(threads + 1) as pool:
            outputs = pool.map(collect, range(threads))  # all wait while the runner runs
            runner = WorkflowRunner(client.store)
            assert client.call(runner.drain) == threads * per_thread
            assert [o for chunk in outputs for o in chunk] == [
                f"T{n}-{i}!" for n in range(threads) for i in range(per_thread)
            ]


def test_closing_and_bad_urls(tmp_path: Path) -> None:
    before = threading.active_count()
    client = SyncClient(f"sqlite:///{tmp_path / 'c.db'}")
    client.apply_schema()
    handle = client.start_workflow(greet, "x")
    client.close()
    client.close()  # a second close does nothing
    with pytest.raises(ConfigurationError, match="closed"):
        handle.status()
    with pytest.raises(ConfigurationError, match="closed"):
        client.start_workflow(greet, "y")
    with pytest.raises(InvalidDatabaseURLError):
        SyncClient("nosuch://host/db")
    assert threading.active_count() == before, "no loop thread is left behind"
