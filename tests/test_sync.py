"""``SyncClient``: the blocking API for sync code, on SQLite and PostgreSQL, from many threads."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from durable_core import (
    BlockingCallInEventLoopError,
    ConfigurationError,
    DurableClient,
    FrameworkError,
    InvalidDatabaseURLError,
    Schedule,
    WaitTimeoutError,
    WorkflowConflictError,
    WorkflowFailedError,
    WorkflowHandle,
    WorkflowStart,
    WorkflowStatus,
    recv,
    set_event,
    workflow,
    workflow_step,
)
from durable_core.caller.sync import SyncClient, SyncHandle
from durable_core.definitions.schedules import tick_workflow_id
from durable_core.seams.store import WorkflowStats
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


def run(client: SyncClient, handle: SyncHandle[Any]) -> WorkflowStatus:
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
            start.wait(timeout=120)
            handles = [client.start_workflow(greet, f"t{n}-{i}") for i in range(per_thread)]
            assert {h.status() for h in handles} == {WorkflowStatus.PENDING}
            return [h.id for h in handles]

        with ThreadPoolExecutor(threads) as pool:
            ids = [i for chunk in pool.map(enqueue, range(threads)) for i in chunk]
        assert len(set(ids)) == threads * per_thread
        assert len(client.list_workflows(limit=1000)) == threads * per_thread

        def collect(n: int) -> list[str]:
            start.wait(timeout=120)
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
    with pytest.raises(ConfigurationError, match="max_attempts"):
        SyncClient(f"sqlite:///{tmp_path / 'c.db'}", max_attempts=0)
    assert threading.active_count() == before, "no loop thread is left behind"


@workflow
async def tally(n: int) -> int:
    if n < 0:
        raise ValueError(f"{n} is negative")
    return n


def _in_child(client: SyncClient, results: Any) -> None:
    """What a forked child does with the client it inherited: start a workflow, read it."""
    handle = client.start_workflow(greet, "child")
    results.put((handle.id, handle.status().value, client.get(handle.id).name))


def test_a_forked_child_opens_its_own_loop_and_leaves_the_parents_alone(url: str) -> None:
    with SyncClient(url) as client:
        before = client.start_workflow(greet, "parent")
        # A child made by os.fork, as gunicorn --preload makes its workers.
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, and leave without running pytest's teardown
            code = 1
            try:
                os.close(read)
                handle = client.start_workflow(greet, "forked")
                os.write(write, json.dumps([handle.id, handle.status().value]).encode())
                client.close()
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        if done == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        with os.fdopen(read) as pipe:
            forked_id, forked_status = json.loads(pipe.read())
        assert os.waitstatus_to_exitcode(done[1]) == 0
        assert forked_status == "pending"

        # A child of multiprocessing's fork start method.
        context = multiprocessing.get_context("fork")
        results = context.SimpleQueue()
        child = context.Process(target=_in_child, args=(client, results))
        child.start()
        child.join(60)
        if child.exitcode is None:
            child.kill()
            pytest.fail("the multiprocessing child hung")
        assert child.exitcode == 0
        mp_id, mp_status, mp_name = results.get()
        assert (mp_status, mp_name) == ("pending", greet.name)

        # The parent's loop and connections were not touched by either child.
        assert before.status() is WorkflowStatus.PENDING
        assert {r.id for r in client.list_workflows()} == {before.id, forked_id, mp_id}


async def test_it_refuses_to_block_a_running_event_loop(tmp_path: Path) -> None:
    client = SyncClient(f"sqlite:///{tmp_path / 'l.db'}")  # made here: it may be
    try:
        with pytest.raises(BlockingCallInEventLoopError, match=r"SyncClient\.apply_schema\(\)"):
            client.apply_schema()
        with pytest.raises(BlockingCallInEventLoopError, match="await open_store"):
            client.start_workflow(greet, "y")
        with pytest.raises(BlockingCallInEventLoopError, match="to_thread"):
            client.close()
        # In a thread of its own it may block: the fix the error names.
        await anyio.to_thread.run_sync(client.apply_schema)
        handle = await anyio.to_thread.run_sync(client.start_workflow, greet, "x")
        with pytest.raises(BlockingCallInEventLoopError, match=r"SyncClient\.status\(\)"):
            handle.status()
        assert await anyio.to_thread.run_sync(handle.status) is WorkflowStatus.PENDING
        assert isinstance(BlockingCallInEventLoopError("x"), FrameworkError)
    finally:
        await anyio.to_thread.run_sync(client.close)


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_it_has_what_the_async_client_has(url: str) -> None:
    assert _public(DurableClient) - _public(SyncClient) == set()
    assert _public(WorkflowHandle) - _public(SyncHandle) - {"store"} == set()
    with SyncClient(url) as client:
        reports = client.with_options(queue="reports", priority=5)
        started = reports.start_workflow(tally, 1)
        assert (started.info().queue, started.info().priority) == ("reports", 5)
        assert client.start_workflow(tally, 2).info().queue == "default", "the original is kept"
        failing = client.start_workflow(tally, -1)
        assert client.call(WorkflowRunner(client.store).run_until_complete, failing.id) is (
            WorkflowStatus.FAILED
        )
        assert [r.id for r in client.list_workflows(queue="reports")] == [started.id]
        assert [r.id for r in client.list_workflows(error_type="builtins.ValueError")] == [
            failing.id
        ]
        first = client.list_workflows(limit=1)[0]
        assert len(client.list_workflows(before=first.id)) == 2
        assert {(b.queue, b.count) for b in client.backlog()} == {("reports", 1), ("default", 1)}
        assert [t.try_number for t in failing.step_tries()] == []  # it failed in its body
        with pytest.raises(WorkflowFailedError):
            failing.output_raw()

        added = client.add_schedule("nightly", tally, Schedule("0 3 * * *", args=(7,)))
        assert (added.name, client.get_schedule("nightly").next_tick.hour) == ("nightly", 3)
        client.pause_schedule("nightly")
        assert client.get_schedule("nightly").paused
        client.resume_schedule("nightly")
        assert [s.name for s in client.list_schedules()] == ["nightly"]
        january = datetime(2026, 1, 1, tzinfo=UTC)
        filled = client.backfill_schedule("nightly", january, january + timedelta(days=2))
        assert filled == [
            tick_workflow_id("nightly", january + timedelta(days=d, hours=3)) for d in (0, 1)
        ]
        triggered = client.trigger_schedule("nightly")
        assert triggered is not None and client.get_schedule("nightly").latest_id == triggered.id
        client.delete_schedule("nightly")
        assert client.list_schedules() == []
        assert client.has_stats is isinstance(client.store, WorkflowStats)
