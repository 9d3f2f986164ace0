"""The replay check replays every kind of call the door journals through unchanged code
without touching the store (no false divergence, no hang), and reports a step inserted
without a patch; ``durable replay-check`` ends with exit 0 or 1, never a hang."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from durable_core import (
    DurableClient,
    InvalidStateError,
    Registry,
    WorkflowStatus,
    recv,
    workflow,
    workflow_step,
)
from durable_core.codec import encode
from durable_core.runtime.replay import export, replay, replay_check
from durable_core.seams.store import Store
from durable_core.seams.talk_roles import updates_of
from durable_core.testing import WorkflowRunner
from tests.replay_apps.every import define

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
OLD, SAME, INSERTED = Registry(), Registry(), Registry()
old = define(OLD, inserted=False)
define(SAME, inserted=False)
define(INSERTED, inserted=True)

REPLAY_HANG_GUARD = 600
"""Seconds a ``durable replay-check`` process may take before the test calls it hung."""


async def _until_it_waits(runner: WorkflowRunner, workflow_id: str) -> WorkflowStatus:
    """Run the workflow (and what it started) until it ends or waits for the test."""
    try:
        return await runner.run_until_complete(workflow_id)
    except InvalidStateError:
        return WorkflowStatus.WAITING


async def _no_divergence(store: Store, registry: Registry, **where: object) -> None:
    report = await replay_check(store, registry, **where)  # type: ignore[arg-type]
    assert report.checked >= 1
    assert report.divergences == [], report.divergences


async def test_every_journaled_call_replays_unchanged_code_and_an_inserted_step_diverges(
    sqlite_or_postgres: Store,
) -> None:
    store = sqlite_or_postgres
    client = DurableClient(store)
    runner = WorkflowRunner(store, registry=OLD)
    handle = await client.start_workflow(old.every, "cup")
    assert await _until_it_waits(runner, handle.id) is WorkflowStatus.WAITING
    assert (await handle.info()).waiting_for == "update:ask"
    await _no_divergence(store, SAME, workflow_ids=[handle.id])

    await updates_of(store).send_update(handle.id, "u1", "ask", encode("how much?"))
    assert await _until_it_waits(runner, handle.id) is WorkflowStatus.WAITING
    assert (await handle.info()).waiting_for == "message:finish"
    await _no_divergence(store, SAME, workflow_ids=[handle.id])
    report = await replay_check(store, INSERTED, workflow_ids=[handle.id])
    [divergence] = report.divergences
    assert (divergence.workflow_id, divergence.step_index) == (handle.id, 0)
    assert divergence.recorded == divergence.called == "every.note"

    await client.send(handle.id, "now", topic="finish")
    assert await _until_it_waits(runner, handle.id) is WorkflowStatus.SUCCEEDED
    year = (await handle.steps())[4].output or ""
    assert await handle.output() == (
        f"first, {year[1:5]}, True, patched, cup: hello, "
        "compensated, branch 0, branch 0 again, branch 1, branch 1 again, left, right, now"
    )
    assert await replay(await export(store, handle.id), SAME) is None, "replays to its end"


def _durable(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", *args],
        capture_output=True,
        text=True,
        timeout=REPLAY_HANG_GUARD,
        cwd=ROOT,
    )


async def test_replay_check_command_gates_a_deploy_on_every_kind_of_call(tmp_path: Path) -> None:
    """A saga that compensated used to meet a false divergence in a shielded scope and
    hang the check; now it ends with exit 0 for the same code and 1 for a changed one."""
    from durable_sqlite import SQLiteStore

    url = f"sqlite:///{tmp_path / 'flight.db'}"
    async with SQLiteStore(url) as store:
        await store.apply_schema()
        runner = WorkflowRunner(store, registry=OLD)
        handle = await DurableClient(store).start_workflow(old.every, "mug")
        assert await _until_it_waits(runner, handle.id) is WorkflowStatus.WAITING
        await updates_of(store).send_update(handle.id, "u1", "ask", encode("how much?"))
        assert await _until_it_waits(runner, handle.id) is WorkflowStatus.WAITING

    same = _durable("replay-check", "--app", "tests.replay_apps.every_same", "--database-url", url)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "0 replay as recorded" in same.stderr
    changed = _durable(
        "replay-check", "--app", "tests.replay_apps.every_inserted", "--database-url", url
    )
    assert changed.returncode == 1, changed.stdout + changed.stderr
    lines = changed.stdout.splitlines()
    assert any(line.startswith(f"{handle.id} every.flow at index 0") for line in lines), lines


STUCK = Registry()


@workflow_step(name="stuck.note")
async def stuck_note(what: str) -> str:
    return what


@workflow(name="stuck.flow", registry=STUCK)
async def stuck_v1() -> str:
    first = await stuck_note("first")
    return f"{first}, {await stuck_note('second')}, {await recv('finish')}"


async def test_a_replay_that_never_ends_is_reported_not_waited_for(tmp_path: Path) -> None:
    """The new code blocks forever in a shielded scope before its history ends: the check
    gives up on it after ``--timeout`` and reports it (exit 1); the process ends."""
    from durable_sqlite import SQLiteStore

    url = f"sqlite:///{tmp_path / 'flight.db'}"
    async with SQLiteStore(url) as store:
        await store.apply_schema()
        handle = await DurableClient(store).start_workflow(stuck_v1)
        runner = WorkflowRunner(store, registry=STUCK)
        assert await runner.run_once(handle) is WorkflowStatus.WAITING

    app = ("--app", "tests.replay_apps.stuck", "--database-url", url)
    checked = _durable("replay-check", *app, "--timeout", "1")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    [line] = checked.stdout.splitlines()
    assert line.startswith(f"{handle.id} stuck.flow: the replay did not end within 1s"), line
