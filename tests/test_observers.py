"""Observer hooks: registered through an entry point or in code, fired on every path.

The entry-point observer is ``durable_example_store.observer`` from the example
distribution in tests/example_store_plugin (``pip install -e`` it); it appends
events to the file named by ``DURABLE_EXAMPLE_EVENTS``.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest

import durable_core
from durable_core import (
    DurableClient,
    WorkflowConfig,
    WorkflowContext,
    WorkflowStatus,
    hookimpl,
    register_observer,
    unregister_observer,
    workflow,
    workflow_step,
)
from durable_core.contract import workflows as wfs
from durable_core.contract.support import unique_name
from durable_core.errors import ConfigurationError
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.events import ATTEMPT_FIELDS, AttemptEvent
from durable_core.seams.hookspecs import ObserverSpec
from durable_core.seams.plugins import plugin_manager
from durable_core.seams.store import Store
from durable_core.sql.schema import WORKFLOW_TABLES, workflows
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

EVENTS = [name for name in dir(ObserverSpec) if name.startswith("durable_")]
WORKER_FIELDS = ("worker_id", "workflow_id", "attempts", "max_attempts")


@workflow_step
async def cancel_myself() -> str:
    """Cancel the running workflow from inside it, so its next write loses the lease."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    await ctx.store.cancel_workflow(ctx.workflow_id)
    return "cancelled"


@workflow
async def self_cancelling() -> str:
    return await cancel_myself()


@workflow_step
async def steal_my_lease() -> str:
    """Give the running workflow's lease to another worker, as a reclaim after expiry would."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    claimed = await ctx.store.acquire(
        ctx.workflow_id, worker_id="thief", lease_seconds=30, due_only=False
    )
    assert claimed is None, "a held lease cannot be taken while it lasts"
    engine = ctx.store.engine  # type: ignore[attr-defined]
    async with engine.begin() as conn:
        await conn.execute(
            workflows.update().where(workflows.c.id == ctx.workflow_id).values(lock_token="other")
        )
    return "stolen"


@workflow
async def robbed() -> str:
    return await steal_my_lease()


@workflow
async def naps() -> None:
    await durable_core.sleep(60)


class Recorder:
    """An in-code observer: every event, with every field its hook spec names."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def _add(self, event: str, **fields: Any) -> None:
        self.events.append({"event": event, **fields})

    def for_workflow(self, workflow_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("workflow_id") == workflow_id]

    @hookimpl
    def durable_workflow_enqueued(
        self, workflow_id: str, workflow_name: str, max_attempts: int
    ) -> None:
        self._add(
            "workflow_enqueued",
            workflow_id=workflow_id,
            workflow_name=workflow_name,
            max_attempts=max_attempts,
        )

    def _attempt(self, event: str, attempt: AttemptEvent, **fields: Any) -> None:
        self._add(event, **{name: getattr(attempt, name) for name in ATTEMPT_FIELDS}, **fields)

    @hookimpl
    def durable_workflow_claimed(self, attempt: AttemptEvent) -> None:
        self._attempt("workflow_claimed", attempt)

    @hookimpl
    def durable_step_started(self, attempt: AttemptEvent, step_index: int, step_name: str) -> None:
        self._attempt("step_started", attempt, step_index=step_index, step_name=step_name)

    @hookimpl
    def durable_step_succeeded(
        self, attempt: AttemptEvent, step_index: int, step_name: str, cached: bool
    ) -> None:
        self._attempt(
            "step_succeeded", attempt, step_index=step_index, step_name=step_name, cached=cached
        )

    @hookimpl
    def durable_step_failed(
        self, attempt: AttemptEvent, step_index: int, step_name: str, error: BaseException
    ) -> None:
        self._attempt(
            "step_failed", attempt, step_index=step_index, step_name=step_name, error=error
        )

    @hookimpl
    def durable_retry_scheduled(
        self, attempt: AttemptEvent, error: dict[str, Any], delay_seconds: float
    ) -> None:
        self._attempt("retry_scheduled", attempt, error=error, delay_seconds=delay_seconds)

    @hookimpl
    def durable_workflow_succeeded(self, attempt: AttemptEvent, output: str) -> None:
        self._attempt("workflow_succeeded", attempt, output=output)

    @hookimpl
    def durable_workflow_failed(self, attempt: AttemptEvent, error: dict[str, Any]) -> None:
        self._attempt("workflow_failed", attempt, error=error)

    @hookimpl
    def durable_workflow_waiting(
        self, attempt: AttemptEvent, waiting_for: str, wake_at: Any
    ) -> None:
        self._attempt("workflow_waiting", attempt, waiting_for=waiting_for, wake_at=wake_at)

    @hookimpl
    def durable_workflow_cancelled(self, attempt: AttemptEvent) -> None:
        self._attempt("workflow_cancelled", attempt)

    @hookimpl
    def durable_lease_lost(self, attempt: AttemptEvent) -> None:
        self._attempt("lease_lost", attempt)

    @hookimpl
    def durable_worker_started(self, worker_id: str, concurrency: int) -> None:
        self._add("worker_started", worker_id=worker_id, concurrency=concurrency)

    @hookimpl
    def durable_worker_stopping(self, worker_id: str, in_flight: int) -> None:
        self._add("worker_stopping", worker_id=worker_id, in_flight=in_flight)

    @hookimpl
    def durable_attempt_unsettled(self, attempt: AttemptEvent, error: BaseException) -> None:
        self._attempt("attempt_unsettled", attempt, error=error)

    @hookimpl
    def durable_message_sent(
        self, workflow_id: str, topic: str, headers: Mapping[str, str]
    ) -> None:
        self._add("message_sent", workflow_id=workflow_id, topic=topic, headers=dict(headers))

    @hookimpl
    def durable_claim_finished(
        self, worker_id: str, claimed: int, limit: int, seconds: float
    ) -> None:
        self._add(
            "claim_finished", worker_id=worker_id, claimed=claimed, limit=limit, seconds=seconds
        )

    @hookimpl
    def durable_group_commit_flushed(
        self, writes: int, steps: int, settlements: int, seconds: float
    ) -> None:
        self._add(
            "group_commit_flushed",
            writes=writes,
            steps=steps,
            settlements=settlements,
            seconds=seconds,
        )


class Exploding:
    """An observer whose every hook raises."""

    def __init__(self) -> None:
        self.calls = 0

    def _explode(self) -> None:
        self.calls += 1
        raise RuntimeError("observer bug")

    @hookimpl
    def durable_workflow_enqueued(self, workflow_id: str) -> None:
        self._explode()

    @hookimpl
    def durable_workflow_claimed(self, attempt: AttemptEvent) -> None:
        self._explode()

    @hookimpl
    def durable_step_started(self, attempt: AttemptEvent) -> None:
        self._explode()

    @hookimpl
    def durable_step_succeeded(self, attempt: AttemptEvent) -> None:
        self._explode()

    @hookimpl
    def durable_step_failed(self, attempt: AttemptEvent) -> None:
        self._explode()

    @hookimpl
    def durable_retry_scheduled(self, attempt: AttemptEvent) -> None:
        self._explode()

    @hookimpl
    def durable_workflow_succeeded(self, attempt: AttemptEvent) -> None:
        self._explode()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    observer = Recorder()
    register_observer(observer)
    yield observer
    unregister_observer(observer)


@pytest.fixture
def key() -> Iterator[str]:
    value = unique_name("observed")
    yield value
    wfs.forget(value)


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Switch the entry-point observer on, recording into a fresh file."""
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv("DURABLE_EXAMPLE_EVENTS", str(path))
    return path


def read_events(path: Path, workflow_id: str | None = None) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if workflow_id is None:
        return events
    return [e for e in events if e.get("workflow_id") == workflow_id]


def expected_retry_once(attempt_one: int = 1) -> list[tuple[str, int | None, int | None]]:
    """(event, attempts, step_index) of ``three_steps`` when step_two fails once."""
    a, b = attempt_one, attempt_one + 1
    return [
        ("workflow_enqueued", None, None),
        ("workflow_claimed", a, None),
        ("step_started", a, 0),
        ("step_succeeded", a, 0),
        ("step_started", a, 1),
        ("step_failed", a, 1),
        ("retry_scheduled", a, None),
        ("workflow_claimed", b, None),
        ("step_succeeded", b, 0),
        ("step_started", b, 1),
        ("step_succeeded", b, 1),
        ("step_started", b, 2),
        ("step_succeeded", b, 2),
        ("workflow_succeeded", b, None),
    ]


def shape(events: list[dict[str, Any]]) -> list[tuple[str, int | None, int | None]]:
    return [(e["event"], e.get("attempts"), e.get("step_index")) for e in events]


def check_fields(events: list[dict[str, Any]], workflow_id: str, worker_id: str) -> None:
    """Every worker-side event carries the same fields as the worker's logs."""
    enqueued, *worker_side = events
    assert (enqueued["workflow_id"], enqueued["max_attempts"]) == (workflow_id, 3)
    assert enqueued["workflow_name"] == wfs.three_steps.name
    for event in worker_side:
        assert all(field in event for field in WORKER_FIELDS), event
        assert (event["worker_id"], event["workflow_id"], event["max_attempts"]) == (
            worker_id,
            workflow_id,
            3,
        )
    cached = [e["cached"] for e in worker_side if e["event"] == "step_succeeded"]
    assert cached == [False, True, False, False]
    steps = [e["step_name"] for e in worker_side if e["event"] == "step_started"]
    assert steps == [wfs.step_one.name, wfs.step_two.name, wfs.step_two.name, wfs.step_three.name]


# -- the entry-point observer -------------------------------------------------------


def test_the_observer_is_registered_by_its_entry_point() -> None:
    import durable_example_store.observer as observer

    (entry_point,) = [
        ep
        for ep in importlib.metadata.entry_points(group="durable_core")
        if ep.name == "example_observer"
    ]
    assert entry_point.value == "durable_example_store.observer"
    assert plugin_manager().get_plugin("example_observer") is observer
    implemented = {impl.plugin_name for name in EVENTS for impl in _impls(name)}
    assert "example_observer" in implemented
    assert all("example_observer" in {i.plugin_name for i in _impls(name)} for name in EVENTS)


def test_a_plugin_named_in_durable_block_plugins_is_not_loaded() -> None:
    probe = (
        "from durable_core.seams.plugins import plugin_manager\n"
        "m = plugin_manager()\n"
        "print(m.get_plugin('example_observer') is None, m.is_blocked('example_observer'),"
        " m.get_plugin('postgres') is not None)"
    )
    env = {**os.environ, "DURABLE_BLOCK_PLUGINS": " example_observer ,"}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["True", "True", "True"], done.stderr


def _impls(hook_name: str) -> list[Any]:
    return list(getattr(plugin_manager().hook, hook_name).get_hookimpls())


async def test_an_entry_point_observer_sees_a_retry_then_success_in_order(
    sqlite_store: Store, events_file: Path, key: str
) -> None:
    wfs.FAILURES[key] = 1
    handle = await DurableClient(sqlite_store, max_attempts=3).start_workflow(wfs.three_steps, key)
    runner = WorkflowRunner(sqlite_store, WorkflowConfig(retry_backoff_secs=2), worker_id="obs-1")
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED

    events = read_events(events_file, handle.id)
    assert shape(events) == expected_retry_once()
    check_fields(events, handle.id, "obs-1")
    failed = next(e for e in events if e["event"] == "step_failed")
    assert failed["error"].startswith("PlannedFailure: planned failure")
    retry = next(e for e in events if e["event"] == "retry_scheduled")
    assert retry["delay_seconds"] == 2.0
    assert retry["error_type"].endswith("PlannedFailure")
    succeeded = events[-1]
    assert json.loads(succeeded["output"]) == await handle.output()


# -- observers registered in code -----------------------------------------------------


async def test_an_observer_registered_in_code_sees_the_same_events(
    sqlite_store: Store, recorder: Recorder, key: str
) -> None:
    wfs.FAILURES[key] = 1
    handle = await DurableClient(sqlite_store, max_attempts=3).start_workflow(wfs.three_steps, key)
    runner = WorkflowRunner(sqlite_store, WorkflowConfig(retry_backoff_secs=0), worker_id="obs-2")
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    events = recorder.for_workflow(handle.id)
    assert shape(events) == expected_retry_once()
    check_fields(events, handle.id, "obs-2")
    failed = next(e for e in events if e["event"] == "step_failed")
    assert isinstance(failed["error"], wfs.PlannedFailure)


async def test_unregistered_observers_hear_nothing(sqlite_store: Store, key: str) -> None:
    observer = Recorder()
    register_observer(observer)
    unregister_observer(observer)
    handle = await DurableClient(sqlite_store).start_workflow(wfs.three_steps, key)
    await WorkflowRunner(sqlite_store).run_until_complete(handle)
    assert observer.events == []


async def test_a_workflow_that_runs_out_of_attempts_fires_workflow_failed(
    sqlite_store: Store, recorder: Recorder, key: str
) -> None:
    wfs.FAILURES[key] = 99
    handle = await DurableClient(sqlite_store, max_attempts=2).start_workflow(wfs.three_steps, key)
    runner = WorkflowRunner(sqlite_store, WorkflowConfig(retry_backoff_secs=0), worker_id="obs-3")
    assert await runner.run_until_complete(handle) is WorkflowStatus.FAILED
    events = recorder.for_workflow(handle.id)
    assert [e["event"] for e in events].count("retry_scheduled") == 1
    final = events[-1]
    assert final["event"] == "workflow_failed"
    assert (final["attempts"], final["max_attempts"], final["worker_id"]) == (2, 2, "obs-3")
    assert final["error"]["type"].endswith("PlannedFailure")
    assert final["error"]["step_index"] == 1


async def test_being_cancelled_fires_cancelled_not_lease_lost(
    sqlite_store: Store, recorder: Recorder
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(self_cancelling)
    runner = WorkflowRunner(sqlite_store, worker_id="obs-4")
    assert await runner.run_once(handle) is WorkflowStatus.CANCELLED
    events = recorder.for_workflow(handle.id)
    assert [e["event"] for e in events] == [
        "workflow_enqueued",
        "workflow_claimed",
        "step_started",
        "workflow_cancelled",
    ]


async def test_waiting_fires_waiting_with_what_and_until_when(
    sqlite_store: Store, recorder: Recorder
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(naps)
    runner = WorkflowRunner(sqlite_store, worker_id="obs-5")
    assert await runner.run_once(handle) is WorkflowStatus.WAITING
    [event] = [e for e in recorder.for_workflow(handle.id) if e["event"] == "workflow_waiting"]
    assert event["waiting_for"] == "sleep"
    assert event["wake_at"] == (await handle.info()).wake_at


async def test_losing_the_lease_fires_lease_lost(sqlite_store: Store, recorder: Recorder) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(robbed)
    runner = WorkflowRunner(sqlite_store, worker_id="obs-4")
    assert await runner.run_once(handle) is WorkflowStatus.RUNNING
    events = recorder.for_workflow(handle.id)
    assert [e["event"] for e in events] == [
        "workflow_enqueued",
        "workflow_claimed",
        "step_started",
        "lease_lost",
    ]
    lost = events[-1]
    assert {k: lost[k] for k in WORKER_FIELDS} == {
        "worker_id": "obs-4",
        "workflow_id": handle.id,
        "attempts": 1,
        "max_attempts": 3,
    }


# -- a raising observer changes nothing -------------------------------------------------


async def test_a_raising_observer_leaves_the_outcome_unchanged_and_is_logged(
    sqlite_store: Store, recorder: Recorder, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    exploding = Exploding()
    register_observer(exploding, name="exploding-observer")
    try:
        wfs.FAILURES[key] = 1
        with caplog.at_level(logging.ERROR, logger="durable_core.plugins"):
            handle = await DurableClient(sqlite_store).start_workflow(wfs.three_steps, key)
            runner = WorkflowRunner(
                sqlite_store, WorkflowConfig(retry_backoff_secs=0), worker_id="obs-5"
            )
            status = await runner.run_until_complete(handle)
    finally:
        unregister_observer(exploding)
    assert status is WorkflowStatus.SUCCEEDED
    assert await handle.output() == [f"{key}:1", f"{key}:1:2", f"{key}:1:2:3"]
    assert wfs.CALLS[key] == ["one", "two", "two", "three"]
    assert shape(recorder.for_workflow(handle.id)) == expected_retry_once()
    assert exploding.calls == 14
    logged = [r for r in caplog.records if r.name == "durable_core.plugins"]
    assert len(logged) == 14
    assert all("exploding-observer raised in durable_" in r.getMessage() for r in logged)
    assert all(r.exc_info is not None and "observer bug" in str(r.exc_info[1]) for r in logged)
    assert {getattr(r, "workflow_id", None) for r in logged} == {handle.id}


class EarlierSignatures:
    """An observer written for the hooks' signatures before 0.1: the attempt's fields as
    arguments of their own, not ``attempt``."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    @hookimpl
    def durable_step_started(
        self, worker_id: str, workflow_id: str, attempts: int, step_name: str
    ) -> None:
        self.seen.append(("step_started", worker_id, workflow_id, attempts, step_name))

    @hookimpl
    def durable_workflow_succeeded(self, workflow_id: str, max_attempts: int, output: str) -> None:
        self.seen.append(("succeeded", workflow_id, max_attempts, output))

    @hookimpl
    def durable_workflow_enqueued(self, workflow_id: str) -> None:  # not an attempt's hook
        self.seen.append(("enqueued", workflow_id))


def test_an_observer_of_the_earlier_signatures_is_refused_naming_the_arguments() -> None:
    observer = EarlierSignatures()
    with pytest.raises(ConfigurationError) as refused:
        register_observer(observer, name="earlier")
    message = str(refused.value)
    assert message.startswith("observer 'earlier' refused: ")
    assert "durable_step_started" in message and "\n" not in message
    assert all(name in message for name in ("'worker_id'", "'workflow_id'", "'attempts'"))
    assert "earlier" not in {name for name, _ in plugin_manager().list_name_plugin()}


def test_an_observer_naming_an_argument_of_no_signature_is_refused() -> None:
    class Wrong:
        @hookimpl
        def durable_lease_lost(self, workflow_id: str, colour: str) -> None: ...

    with pytest.raises(ConfigurationError, match="colour"):
        register_observer(Wrong(), name="wrong")
    assert plugin_manager().get_plugin("wrong") is None


# -- worker_started and worker_stopping, with the PostgreSQL worker -----------------------


@pytest.fixture
async def postgres_store(postgres_url: str) -> AsyncIterator[Store]:
    from durable_postgres import PostgresStore

    store = PostgresStore(postgres_url)
    await store.open()
    await store.apply_schema()
    conn = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f"TRUNCATE {WORKFLOW_TABLES}")
    finally:
        await conn.close()
    yield store
    await store.close()


async def test_the_worker_fires_every_event_from_start_to_stop(
    postgres_store: Store, events_file: Path, recorder: Recorder, key: str
) -> None:
    wfs.FAILURES[key] = 1
    config = WorkflowConfig(poll_interval_ms=20, retry_backoff_secs=0, concurrency=2)
    worker = WorkflowWorker(postgres_store, config, worker_id="obs-worker")
    handle = await DurableClient(postgres_store, max_attempts=3).start_workflow(
        wfs.three_steps, key
    )
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        assert await handle.wait_with_timeout(15) is WorkflowStatus.SUCCEEDED
        worker.stop()

    for events in (read_events(events_file), recorder.events):
        mine = [
            e
            for e in events
            if e.get("worker_id") == "obs-worker" or e.get("workflow_id") == handle.id
        ]
        claims = [e for e in mine if e["event"] == "claim_finished"]
        assert sum(e["claimed"] for e in claims) == 2, "its two attempts, each claimed once"
        mine = [e for e in mine if e["event"] != "claim_finished"]
        enqueued, started, *flow, stopping = mine
        assert started == {"event": "worker_started", "worker_id": "obs-worker", "concurrency": 2}
        assert stopping == {"event": "worker_stopping", "worker_id": "obs-worker", "in_flight": 0}
        assert shape([enqueued, *flow]) == expected_retry_once()
        check_fields([enqueued, *flow], handle.id, "obs-worker")


# -- through pluggy's own caller ---------------------------------------------------------


class Wrapper:
    """A pluggy new-style hook wrapper around every step start."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    @hookimpl(wrapper=True)
    def durable_step_started(self, step_name: str, step_index: int) -> Any:
        self.seen.append((step_name, step_index))
        return (yield)


async def test_a_pluggy_wrapper_sees_every_event(sqlite_store: Store, key: str) -> None:
    wrapper = Wrapper()
    register_observer(wrapper)
    try:
        handle = await DurableClient(sqlite_store).start_workflow(wfs.three_steps, key)
        await WorkflowRunner(sqlite_store).run_until_complete(handle)
    finally:
        unregister_observer(wrapper)
    assert wrapper.seen == [
        (wfs.step_one.name, 0),
        (wfs.step_two.name, 1),
        (wfs.step_three.name, 2),
    ]


# -- headers: what observers add to a workflow started, handed back at its claim ----------


class Tagger:
    """Adds a header to every workflow started, and notes the headers each claim brings."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.claimed: dict[str, dict[str, str]] = {}

    @hookimpl
    def durable_workflow_headers(self, workflow_id: str) -> dict[str, str]:
        return {"tenant": self.tenant, "started-as": workflow_id}

    @hookimpl
    def durable_workflow_claimed(self, attempt: AttemptEvent, headers: dict[str, str]) -> None:
        self.claimed[attempt.workflow_id] = dict(headers)


class BadHeaders:
    @hookimpl
    def durable_workflow_headers(self) -> Any:
        return {"count": 3}  # not a string: ignored, and logged


class RaisingHeaders:
    @hookimpl
    def durable_workflow_headers(self) -> dict[str, str]:
        raise RuntimeError("headers bug")


async def test_headers_observers_add_are_stored_and_reach_the_claim(
    sqlite_store: Store, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, last = Tagger("first"), Tagger("last")
    plugins = [first, BadHeaders(), RaisingHeaders(), last]
    for plugin in plugins:
        register_observer(plugin)
    try:
        with caplog.at_level(logging.ERROR, logger="durable_core.plugins"):
            handle = await DurableClient(sqlite_store).start_workflow(wfs.three_steps, key)
            await WorkflowRunner(sqlite_store).run_until_complete(handle)
    finally:
        for plugin in plugins:
            unregister_observer(plugin)
    expected = {"tenant": "last", "started-as": handle.id}  # the last registered wins
    assert (await handle.info()).headers == expected
    assert first.claimed == last.claimed == {handle.id: expected}
    messages = [record.getMessage() for record in caplog.records]
    assert any("headers bug" in str(r.exc_info and r.exc_info[1]) for r in caplog.records)
    assert any("{'count': 3}" in message and "ignored" in message for message in messages)


async def test_without_observers_a_workflow_has_no_headers(sqlite_store: Store, key: str) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(wfs.three_steps, key)
    assert (await handle.info()).headers is None
