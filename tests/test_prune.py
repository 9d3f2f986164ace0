"""``durable prune`` on SQLite, PostgreSQL and MariaDB (issue 35): real ``durable`` processes
against each database, counting and removing settled workflows by age with everything that
belongs to them, keeping the rest, and refusing bad input with one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from durable_core.contract.retention_contract import settled
from durable_core.contract.support import new_workflow
from durable_core.durations import utcnow
from durable_core.seams.records import WorkflowStatus
from durable_core.sql import schema
from durable_core.sql.store import SQLStore
from tests.conftest import Backend

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.anyio


def durable(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", "--log-level", "WARNING", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


async def age(store: SQLStore, workflow_id: str, days: float) -> None:
    """Make ``workflow_id`` look as if it ended ``days`` ago."""
    wf = schema.workflows
    moved = wf.update().where(wf.c.id == workflow_id)
    await store.connector.execute(moved.values(completed_at=utcnow() - timedelta(days=days)), None)


async def test_prune_counts_then_removes_what_ended_before_the_age(any_backend: Backend) -> None:
    store = any_backend.store
    assert isinstance(store, SQLStore)
    old_ok = [await settled(store, new_workflow("prune.a"), history=True) for _ in range(3)]
    old_failed = await settled(store, new_workflow("prune.a"), WorkflowStatus.FAILED)
    other_name = await settled(store, new_workflow("prune.b"))
    recent = await settled(store, new_workflow("prune.a"))
    unfinished = new_workflow("prune.a")
    await store.enqueue([unfinished])
    for workflow_id in [*old_ok, old_failed, other_name]:
        await age(store, workflow_id, 40)
    url = any_backend.url

    dry = durable("prune", "--database-url", url, "--older-than", "30d", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    counted = json.loads(dry.stdout)["removed"]
    assert counted["workflows"] == 5 and counted["workflow_steps"] == 3
    assert counted["workflow_messages"] == 3 and counted["workflow_events"] == 3
    assert await store.get_workflow(old_ok[0]) is not None, "a dry run removes nothing"

    only = durable("prune", "--database-url", url, "--older-than", "30d", "--status", "failed")
    assert only.returncode == 0, only.stderr
    assert only.stdout.startswith("pruned 1 settled workflows")
    assert await store.get_workflow(old_failed) is None

    named = durable("prune", "--database-url", url, "--older-than", "30d", "--name", "prune.a")
    assert named.returncode == 0, named.stderr
    assert named.stdout.strip() == (
        "pruned 3 settled workflows and their rows: workflow_attempts 3, workflow_events 3, "
        "workflow_messages 3, workflow_steps 3"
    )
    for workflow_id in old_ok:
        assert await store.get_workflow(workflow_id) is None
    for workflow_id in (other_name, recent, unfinished.id):
        assert await store.get_workflow(workflow_id) is not None


async def test_a_prune_of_every_settled_workflow_needs_yes(any_backend: Backend) -> None:
    store = any_backend.store
    assert isinstance(store, SQLStore)
    ids = [await settled(store, new_workflow("prune.all")) for _ in range(2)]
    for workflow_id in ids:
        await age(store, workflow_id, 2)
    url = any_backend.url
    refused = durable("prune", "--database-url", url, "--older-than", "1d")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == (
        "durable: error: this prune would remove every settled workflow there is (2): "
        "see them with --dry-run, confirm with --yes"
    )
    assert all([await store.get_workflow(i) is not None for i in ids])
    confirmed = durable("prune", "--database-url", url, "--older-than", "1d", "--yes")
    assert confirmed.returncode == 0, confirmed.stderr
    assert confirmed.stdout.startswith("pruned 2 settled workflows")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--older-than", "-1d"], "--older-than must be a positive age such as 30d"),
        (["--older-than=-1d"], "--older-than must be a positive age such as 30d"),
        (["--older-than", "nan"], "got 'nan'"),
        (["--older-than", "30 days"], "got '30 days'"),
        (["--older-than", "30d", "--status", "running"], "invalid choice: 'running'"),
        (["--older-than", "30d", "--batch", "0"], "--batch takes 1 to 10000"),
        ([], "the following arguments are required: --older-than"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    url = f"sqlite:///{tmp_path / 'prune.db'}"
    done = durable("prune", "--database-url", url, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
