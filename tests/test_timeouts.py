"""Workflow timeouts and attempt history, in-process on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import pytest

import durable_core
from durable_core import DurableClient, StepStatus, WorkflowStatus, workflow, workflow_step
from durable_core.errors import ConfigurationError, RegistrationError
from durable_core.runtime.config import WorkflowConfig
from durable_core.seams.store import Store
from durable_core.testing import TestClock, WorkflowRunner
from durable_sqlite import SQLiteStore
from tests.test_cli import durable

pytestmark = pytest.mark.anyio

RAN: list[str] = []
FAILS: dict[str, int] = {}


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    RAN.clear()
    FAILS.clear()
    return sqlite_or_postgres


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0))


@workflow_step
async def slow(key: str) -> str:
    RAN.append(key)
    await anyio.sleep(3600)  # only the workflow's timeout ends it
    return key


@workflow_step
async def quick(key: str) -> str:
    RAN.append(key)
    if FAILS.get(key, 0) > 0:
        FAILS[key] -= 1
        raise RuntimeError(f"{key} failed")
    return key


@workflow(timeout=0.3)
async def runs_too_long(key: str) -> str:
    await quick(f"{key}:first")
    return await slow(key)


@workflow
async def sleeps_an_hour(key: str) -> str:
    await durable_core.sleep(timedelta(hours=1))
    return await quick(key)


@workflow
async def parent_of_a_waiter(key: str) -> str:
    child = await durable_core.start_workflow(waits_for_a_message, key)
    return str(await child.output())


@workflow
async def waits_for_a_message(key: str) -> str:
    return str(await durable_core.recv("never"))


def timed_out(error: dict[str, object] | None) -> bool:
    return error is not None and str(error["type"]).endswith("WorkflowTimeoutError")


async def test_a_timeout_stops_a_running_body(store: Store) -> None:
    # The test needs the deadline to pass while the slow step runs: on a loaded machine it
    # can pass before, so a run in which the slow step never began proves nothing and one
    # with a deadline four times as long follows.
    seconds = 0.3
    for number in itertools.count():
        client = DurableClient(store).with_options(timeout=timedelta(seconds=seconds))
        handle = await client.start_workflow(runs_too_long, f"r{number}")
        with anyio.fail_after(120):
            assert await runner(store).run_once(handle) is WorkflowStatus.CANCELLED
        if f"r{number}" in RAN:
            break
        seconds *= 4
    assert timed_out(await handle.error())
    first, interrupted = await handle.steps()
    assert (first.status, interrupted.status) == (StepStatus.SUCCEEDED, StepStatus.CANCELLED)
    [attempt] = await handle.attempts()
    assert (attempt.attempt, attempt.outcome) == (1, "timed_out")


async def test_a_timeout_ends_a_sleeping_workflow_and_its_waiting_children(store: Store) -> None:
    client = DurableClient(store).with_options(timeout=timedelta(minutes=1))
    sleeper = await client.start_workflow(sleeps_an_hour, "s")
    run = runner(store)
    assert await run.run_once(sleeper) is WorkflowStatus.WAITING
    info = await sleeper.info()
    assert info.deadline is not None and info.wake_at == info.deadline, "woken by its deadline"
    assert await run.run_until_complete(sleeper) is WorkflowStatus.CANCELLED
    assert timed_out(await sleeper.error()) and RAN == []
    parent = await client.start_workflow(parent_of_a_waiter, "p")
    # A runner of its own: the first one's clock stands at the sleeper's deadline, which can
    # be past the parent's before its body has started the child.
    assert await runner(store).run_until_complete(parent) is WorkflowStatus.CANCELLED
    [child] = [r for r in await store.list_workflows(limit=50) if r.parent_id == parent.id]
    assert child.status is WorkflowStatus.CANCELLED
    assert timed_out(json.loads(child.error or "null"))


async def test_a_timeout_ends_a_pending_workflow_without_running_it(store: Store) -> None:
    handle = await DurableClient(store, timeout=0.1).start_workflow(sleeps_an_hour, "p")
    await anyio.sleep(0.2)
    assert await runner(store).run_once(handle) is WorkflowStatus.CANCELLED
    assert timed_out(await handle.error()) and RAN == []
    assert [a.outcome for a in await handle.attempts()] == ["timed_out"]


@workflow(max_attempts=2)
async def fails_twice(key: str) -> str:
    return await quick(key)


async def test_every_attempt_stays_readable_after_a_retry(store: Store, tmp_path: Path) -> None:
    FAILS["h"] = 2
    handle = await DurableClient(store).start_workflow(fails_twice, "h")
    run = runner(store)
    assert await run.run_until_complete(handle) is WorkflowStatus.FAILED
    await store.retry_workflow(handle.id)
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    history = await handle.attempts()
    assert [(a.attempt, a.outcome) for a in history] == [
        (1, "retry"),
        (2, "failed"),
        (1, "succeeded"),
    ]
    assert all(a.worker == "in-process" and a.started_at is not None for a in history)
    assert [json.loads(a.error)["message"] for a in history[:2] if a.error] == ["h failed"] * 2
    if isinstance(store, SQLiteStore):
        shown = durable("show", "--database-url", f"sqlite:///{tmp_path / 'durable.db'}", handle.id)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.split("attempts:")[1].split("steps:")[0].strip().splitlines()
        assert [line.split()[:2] for line in lines] == [
            ["1", "retry"],
            ["2", "failed"],
            ["1", "succeeded"],
        ]
        assert "builtins.RuntimeError: h failed" in lines[0]


def test_bad_timeouts_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="timeout must be a positive duration"):
        DurableClient(SQLiteStore("sqlite:///unused.db"), timeout=0)

    async def body() -> None:
        pass

    with pytest.raises(RegistrationError, match="workflow timeout must be a positive"):
        workflow(timeout=-1)(body)


class FrozenClock(TestClock):
    """A clock that stands still: the wall clock disagrees with the monotonic one."""

    def __init__(self) -> None:
        super().__init__()
        self.at = super().now()

    def now(self) -> datetime:
        return self.at + self.offset


async def test_a_deadline_met_on_the_monotonic_clock_times_out_whatever_the_wall_clock_says(
    store: Store,
) -> None:
    """The body is stopped at its deadline on the monotonic clock; a wall clock that does not
    agree (here: one that stands still) must not turn the stopped body into a success with
    no output (issue 34, suspected defect)."""
    handle = (
        await DurableClient(store).with_options(timeout=0.2).start_workflow(runs_too_long, "frozen")
    )
    run = WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0), clock=FrozenClock())
    with anyio.fail_after(120):
        assert await run.run_once(handle) is WorkflowStatus.CANCELLED
    assert timed_out(await handle.error())
