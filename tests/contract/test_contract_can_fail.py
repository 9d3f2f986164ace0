"""The contract suite can fail: stores that are wrong in one way each fail it.

The suite runs in a pytester sandbox, which has none of this project's
conftest files, so these runs also show that a plugin author needs nothing but
the installed plugin, a ``durable_store`` fixture and a subclass.
"""

from __future__ import annotations

import pytest

from durable_core.seams.plugins import plugin_manager

pytest_plugins = ["pytester"]

# Load the entry-point plugins now: pytester forgets every module first imported while it
# exists, and the process-wide plugin manager would go on holding the forgotten copies.
plugin_manager()

DOUBLES = '''
import shutil
from datetime import UTC, datetime, timedelta

import pytest

from durable_core.errors import LeaseLostError
from durable_core.contract import NoClaimerContract, StoreContract
from durable_core.sql.schema import workflows
from durable_sqlite import SQLiteStore


class HeartbeatIgnoresToken(SQLiteStore):
    """Renews the lease of whoever asks, checking only that the workflow exists."""

    async def heartbeat(self, lease, lease_seconds):
        now = datetime.now(UTC)
        stmt = workflows.update().where(workflows.c.id == lease.workflow_id).values(
            locked_until=now + timedelta(seconds=lease_seconds), updated_at=now
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(stmt)
        if result.rowcount == 0:
            raise LeaseLostError(f"no workflow {lease.workflow_id}")


class MisorderedSteps(SQLiteStore):
    """Returns the steps newest index first."""

    async def load_steps(self, workflow_id):
        return sorted(await super().load_steps(workflow_id), key=lambda s: -s.step_index)


class ReclaimKeepsAttempts(SQLiteStore):
    """Does not count the attempt when it takes over an expired lease."""

    async def acquire(self, workflow_id, *, worker_id, lease_seconds, due_only=True):
        before = await self.get_workflow(workflow_id)
        claimed = await super().acquire(
            workflow_id, worker_id=worker_id, lease_seconds=lease_seconds, due_only=due_only
        )
        if claimed is None or before is None or before.status.value != "running":
            return claimed
        async with self.engine.begin() as conn:
            await conn.execute(
                workflows.update().where(workflows.c.id == workflow_id).values(
                    attempts=before.attempts
                )
            )
        return type(claimed)(
            id=claimed.id, name=claimed.name, input=claimed.input, attempts=before.attempts,
            max_attempts=claimed.max_attempts, lease=claimed.lease,
        )


class NoWaiting(SQLiteStore):
    """A store written before workflows could wait: it lacks the waiting operations."""

    suspend = None
    receive = None


class EffectsIgnoreTheLease(SQLiteStore):
    """Sends and starts a body's children, then records the call apart: the effect itself is
    not fenced by the lease (as every store was before issue 34)."""

    async def send_from(self, call, workflow_id, topic, payload, message_id):
        await self.send(workflow_id, topic, payload, message_id)
        await self.record_step(
            call.lease, call.index, call.name, call.input, call.output, path=call.path
        )

    async def enqueue_from(self, call, workflows):
        written = await self.enqueue(workflows)
        await self.record_step(
            call.lease, call.index, call.name, call.input, call.output, path=call.path
        )
        return written


async def migrated(factory):
    """A SQLite database with the schema applied, made once per run (a copy per test)."""
    template = factory.getbasetemp() / "migrated.db"
    if not template.exists():
        making = template.with_name("migrating.db")
        async with SQLiteStore(f"sqlite:///{making}") as store:
            await store.apply_schema()
        making.rename(template)
    return template


def store_fixture(cls):
    @pytest.fixture
    async def durable_store(self, tmp_path, tmp_path_factory):
        path = tmp_path / "contract.db"
        shutil.copyfile(await migrated(tmp_path_factory), path)
        store = cls(f"sqlite:///{path}")
        await store.open()
        await store.apply_schema()  # checks the copy's version
        yield store
        await store.close()

    return durable_store


class TestHeartbeatIgnoresToken(StoreContract, NoClaimerContract):
    durable_store = store_fixture(HeartbeatIgnoresToken)


class TestMisorderedSteps(StoreContract):
    durable_store = store_fixture(MisorderedSteps)


class TestReclaimKeepsAttempts(StoreContract):
    durable_store = store_fixture(ReclaimKeepsAttempts)


class TestNoWaiting(StoreContract):
    durable_store = store_fixture(NoWaiting)


class TestEffectsIgnoreTheLease(StoreContract):
    durable_store = store_fixture(EffectsIgnoreTheLease)
'''


def run_class(pytester: pytest.Pytester, cls: str, *options: str) -> dict[str, list[str]]:
    """Run one class of the doubles; the names of the tests that passed, failed or skipped."""
    pytester.makepyfile(test_doubles=DOUBLES)
    reprec = pytester.inline_run("-p", "no:cacheprovider", f"test_doubles.py::{cls}", *options)
    outcomes: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    for report in reprec.getreports("pytest_runtest_logreport"):
        if report.when == "call" or report.failed or report.skipped:
            outcomes[report.outcome].append(report.nodeid.split("::")[-1])
    return outcomes


def test_a_heartbeat_that_ignores_the_token_fails_exactly_the_fencing_tests(
    pytester: pytest.Pytester,
) -> None:
    """The whole suite runs; everything passes but the tests that check a heartbeat
    after the lease was lost."""
    broken = run_class(pytester, "TestHeartbeatIgnoresToken")
    assert sorted(broken["failed"]) == [
        *(
            f"test_a_lease_that_lost_the_workflow_cannot_write[heartbeat-{kind}]"
            for kind in ("cancelled", "forged", "reclaimed", "settled")
        ),
        "test_cancelling_a_parent_cancels_its_unfinished_children",
        "test_several_waits_suspend_until_the_soonest_deadline",
        "test_suspend_releases_the_lease_and_does_not_count_an_attempt",
    ]
    assert broken["skipped"] == []
    assert len(broken["passed"]) > 100
    assert (
        "test_a_lease_that_lost_the_workflow_cannot_write[heartbeat-unknown_workflow]"
        in (broken["passed"])
    )


def test_misordered_steps_fail_the_ordering_test(pytester: pytest.Pytester) -> None:
    broken = run_class(pytester, "TestMisorderedSteps", "-k", "load_steps or start_step")
    assert "test_load_steps_is_ordered_by_index" in broken["failed"]
    assert "test_start_step_records_a_running_step" in broken["passed"]
    assert broken["skipped"] == []


def test_a_reclaim_that_keeps_attempts_fails(pytester: pytest.Pytester) -> None:
    broken = run_class(pytester, "TestReclaimKeepsAttempts", "-k", "acquire or crash")
    assert "test_acquire_reclaims_an_expired_lease" in broken["failed"]
    assert "test_a_step_left_running_by_a_crash_reruns" in broken["failed"]
    assert "test_acquire_takes_the_lease" in broken["passed"]
    assert broken["skipped"] == []


def test_a_store_without_the_waiting_operations_fails_naming_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_doubles=DOUBLES)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "test_doubles.py::TestNoWaiting", "-k", "suspend or receive"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 3 and "passed" not in outcomes
    result.stdout.fnmatch_lines(
        [
            "*NoWaiting lacks suspend(), receive(): the Store protocol needs them for workflows "
            "that wait*"
        ]
    )


def test_effects_written_apart_from_the_lease_fail_the_effect_fencing_tests(
    pytester: pytest.Pytester,
) -> None:
    """A store that sends and starts children for a body without fencing them by its lease
    (it only records the call under the lease, after) fails exactly the tests of a stale
    lease's send and child start."""
    broken = run_class(pytester, "TestEffectsIgnoreTheLease", "-k", "effect or body")
    assert sorted(broken["failed"]) == sorted(
        f"test_a_lease_that_lost_the_workflow_cannot_write_an_effect[{effect}-{kind}]"
        for effect in ("child_start", "send")
        for kind in ("cancelled", "forged", "reclaimed", "settled", "unknown_workflow")
    )
    assert broken["skipped"] == []
    assert "test_a_body_sends_with_its_call_recorded" in broken["passed"]
    assert (
        "test_a_lease_that_lost_the_workflow_cannot_write_an_effect[set_event-reclaimed]"
        in (broken["passed"])
    )
