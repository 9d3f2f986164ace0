"""``StoreContract``: what every :class:`~durable_core.seams.store.Store` must do."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from ..caller.client import DurableClient
from ..codec import encode_arguments
from ..codec.failures import load_error
from ..errors import (
    CorruptRecordError,
    FrameworkError,
    InvalidArgumentsError,
    InvalidStateError,
    LeaseLostError,
    WorkflowConflictError,
    WorkflowNotFoundError,
)
from ..runtime.config import WorkflowConfig
from ..seams.records import (
    ClaimedWorkflow,
    Lease,
    Settlement,
    StepStatus,
    StepWrite,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.store import Store
from ..testing import WorkflowRunner
from . import workflows as wfs
from .listing_contract import ListingContract
from .schedule_contract import ScheduleContract
from .support import (
    ODD_TEXTS,
    SAFETY_SECONDS,
    Tamper,
    big_text,
    new_workflow,
    snapshot,
    unique_name,
)
from .waiting_contract import WaitingContract

_WRITES = (
    "start_step_new_index",
    "start_step_existing_index",
    "complete_step",
    "fail_step",
    "heartbeat",
    "settle_succeeded",
    "settle_failed",
    "settle_pending",
)

_STALE_KINDS = ("reclaimed", "settled", "cancelled", "forged", "unknown_workflow")


class StoreContract(WaitingContract, ScheduleContract, ListingContract):
    """The store contract suite. Subclass it in a test module that has a ``durable_store``
    fixture (an opened store, schema applied, tables empty)::

        class TestMyStore(StoreContract):
            pass

    Optional fixtures (defaults come from the ``durable_core_contract`` pytest plugin):

    ``durable_second_store``
        A second, separately opened instance on the same database, for the concurrency
        tests (default: ``durable_store`` itself).
    ``durable_tamper``
        Writes raw values into rows to simulate corruption (default: through the store's
        SQLAlchemy ``engine``; override it for stores without one).

    Class attributes tune timing: ``clock_tolerance`` is how far a store's clock may be
    from the test process's, ``short_lease`` the lease (seconds) used to make one expire.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    clock_tolerance: ClassVar[timedelta] = timedelta(seconds=5)
    short_lease: ClassVar[float] = 0.05
    big_payload_megabytes: ClassVar[tuple[int, ...]] = (1, 5)
    concurrent_writers: ClassVar[int] = 20

    @pytest.fixture(scope="session")
    @classmethod
    def anyio_backend(cls) -> str:
        """The stores run on asyncio (SQLAlchemy's async engine and asyncpg need it)."""
        return "asyncio"

    # -- helpers --------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def contract_started_at(self) -> datetime:
        """When this test began: what the store stamps during it comes after."""
        self.started_at = datetime.now(UTC)
        return self.started_at

    def assert_near_now(self, moment: datetime | None, *, offset: float = 0.0) -> None:
        """``moment`` is aware UTC and ``offset`` seconds after a time during this test
        (between its start and now), within ``clock_tolerance``: however slow the machine."""
        assert moment is not None
        assert moment.tzinfo is not None, f"{moment!r} is naive; stores return aware UTC times"
        assert moment.utcoffset() == timedelta(0), f"{moment!r} is not in UTC"
        shift = timedelta(seconds=offset)
        earliest = self.started_at + shift - self.clock_tolerance
        latest = datetime.now(UTC) + shift + self.clock_tolerance
        assert earliest <= moment <= latest, f"{moment} is not between {earliest} and {latest}"

    async def enqueue_one(self, store: Store, **options: Any) -> str:
        row = new_workflow(**options)
        await store.enqueue([row])
        return row.id

    async def acquired(
        self,
        store: Store,
        *,
        worker_id: str = "worker-a",
        lease_seconds: float = 30.0,
        **options: Any,
    ) -> ClaimedWorkflow:
        """Enqueue a workflow and take its lease."""
        workflow_id = await self.enqueue_one(store, **options)
        claimed = await store.acquire(workflow_id, worker_id=worker_id, lease_seconds=lease_seconds)
        assert claimed is not None, "a fresh pending workflow must be acquirable"
        return claimed

    async def expire(self) -> None:
        """Wait until a lease of ``short_lease`` seconds has expired."""
        await anyio.sleep(self.short_lease * 2 + 0.05)

    async def record(self, store: Store, workflow_id: str) -> WorkflowRecord:
        found = await store.get_workflow(workflow_id)
        assert found is not None, f"workflow {workflow_id} vanished"
        return found

    # -- enqueue and read side ------------------------------------------------

    async def test_enqueue_then_get_returns_the_row(self, durable_store: Store) -> None:
        row = new_workflow(input='{"args":[1,"two"],"kwargs":{"x":null}}', max_attempts=7)
        await durable_store.enqueue([row])
        got = await self.record(durable_store, row.id)
        assert (got.id, got.name, got.input) == (row.id, row.name, row.input)
        assert got.status is WorkflowStatus.PENDING
        assert (got.attempts, got.max_attempts) == (0, 7)
        assert (got.output, got.error, got.completed_at) == (None, None, None)
        assert (got.locked_by, got.locked_until) == (None, None)
        for moment in (got.created_at, got.updated_at, got.run_at):
            self.assert_near_now(moment)
        assert abs(got.run_at - got.created_at) < timedelta(seconds=1)

    async def test_enqueue_nothing_is_a_no_op(self, durable_store: Store) -> None:
        await durable_store.enqueue([])
        assert await durable_store.list_workflows(limit=10) == []

    async def test_enqueue_batch_of_500_in_one_call(self, durable_store: Store) -> None:
        name = unique_name("batch")
        rows = [new_workflow(name, input=f'{{"args":[{i}],"kwargs":{{}}}}') for i in range(500)]
        await durable_store.enqueue(rows)
        listed = await durable_store.list_workflows(name=name, limit=1000)
        assert len(listed) == 500
        assert {r.id: r.input for r in listed} == {r.id: r.input for r in rows}
        assert all(r.status is WorkflowStatus.PENDING and r.attempts == 0 for r in listed)

    async def test_enqueue_batch_is_atomic(self, durable_store: Store) -> None:
        first, second = new_workflow(), new_workflow()
        duplicate = new_workflow(id=first.id)
        with pytest.raises(FrameworkError):
            await durable_store.enqueue([first, second, duplicate])
        assert await durable_store.get_workflow(first.id) is None
        assert await durable_store.get_workflow(second.id) is None

    async def test_enqueue_existing_id_with_other_input_conflicts_and_keeps_the_row(
        self, durable_store: Store
    ) -> None:
        row = new_workflow(input='{"args":["original"],"kwargs":{}}')
        await durable_store.enqueue([row])
        other = dataclasses.replace(row, input='{"args":[],"kwargs":{}}')
        fresh = new_workflow()
        with pytest.raises(WorkflowConflictError, match=row.id):
            await durable_store.enqueue([fresh, other])
        assert (await self.record(durable_store, row.id)).input == row.input
        assert await durable_store.get_workflow(fresh.id) is None, "a conflict writes nothing"
        renamed = dataclasses.replace(row, name=unique_name("other"))
        with pytest.raises(WorkflowConflictError, match="is taken by workflow"):
            await durable_store.enqueue([renamed])

    async def test_enqueue_repeated_start_is_a_no_op(self, durable_store: Store) -> None:
        row = new_workflow(input='{"args":["once"],"kwargs":{}}')
        assert list(await durable_store.enqueue([row])) == [row.id]
        claimed = await durable_store.acquire(row.id, worker_id="w", lease_seconds=30)
        assert claimed is not None
        fresh = new_workflow()
        assert list(await durable_store.enqueue([row, fresh, row])) == [fresh.id]
        found = await self.record(durable_store, row.id)
        assert (found.status, found.attempts) == (WorkflowStatus.RUNNING, 1), "left as it was"

    async def test_enqueue_delay_sets_run_at_with_subsecond_precision(
        self, durable_store: Store
    ) -> None:
        later = await self.enqueue_one(durable_store, delay_seconds=60.0)
        soon = await self.enqueue_one(durable_store, delay_seconds=0.25)
        got_later = await self.record(durable_store, later)
        got_soon = await self.record(durable_store, soon)
        assert abs((got_later.run_at - got_later.created_at) - timedelta(seconds=60)) < timedelta(
            milliseconds=5
        )
        assert abs(
            (got_soon.run_at - got_soon.created_at) - timedelta(milliseconds=250)
        ) < timedelta(milliseconds=5)

    async def test_get_unknown_workflow_returns_none(self, durable_store: Store) -> None:
        assert await durable_store.get_workflow(new_workflow().id) is None

    async def test_list_is_newest_first(self, durable_store: Store) -> None:
        name = unique_name("order")
        ids = []
        for _ in range(5):
            ids.append(await self.enqueue_one(durable_store, name=name))
            await anyio.sleep(0.003)
        listed = await durable_store.list_workflows(name=name)
        assert [r.id for r in listed] == ids[::-1]
        assert [r.created_at for r in listed] == sorted(
            (r.created_at for r in listed), reverse=True
        )

    async def test_list_limit_keeps_the_newest(self, durable_store: Store) -> None:
        name = unique_name("limit")
        ids = []
        for _ in range(5):
            ids.append(await self.enqueue_one(durable_store, name=name))
            await anyio.sleep(0.003)
        newest = await durable_store.list_workflows(name=name, limit=2)
        assert [r.id for r in newest] == [ids[4], ids[3]]
        assert len(await durable_store.list_workflows(name=name, limit=1)) == 1

    async def test_list_filters_by_status_and_name(self, durable_store: Store) -> None:
        alpha, beta = unique_name("alpha"), unique_name("beta")
        pending_alpha = await self.enqueue_one(durable_store, name=alpha)
        running_alpha = (await self.acquired(durable_store, name=alpha)).id
        done = await self.acquired(durable_store, name=beta)
        await durable_store.settle(Settlement(done.lease, WorkflowStatus.SUCCEEDED, output="1"))
        pending_beta = await self.enqueue_one(durable_store, name=beta)

        def ids(records: list[WorkflowRecord]) -> set[str]:
            return {r.id for r in records}

        assert ids(await durable_store.list_workflows(name=alpha)) == {pending_alpha, running_alpha}
        assert ids(await durable_store.list_workflows(status=WorkflowStatus.PENDING)) == {
            pending_alpha,
            pending_beta,
        }
        assert ids(await durable_store.list_workflows(status=WorkflowStatus.RUNNING)) == {
            running_alpha
        }
        assert ids(
            await durable_store.list_workflows(status=WorkflowStatus.SUCCEEDED, name=beta)
        ) == {done.id}
        assert await durable_store.list_workflows(status=WorkflowStatus.FAILED) == []

    async def test_backlog_counts_unfinished_workflows_by_queue_name_and_status(
        self, durable_store: Store
    ) -> None:
        name, done_name = unique_name("backlog"), unique_name("backlog-done")
        rows = [new_workflow(name) for _ in range(3)]
        elsewhere = dataclasses.replace(new_workflow(name), queue="reports")
        done = new_workflow(done_name)
        await durable_store.enqueue([*rows, elsewhere, done])
        assert await durable_store.acquire(rows[0].id, worker_id="w", lease_seconds=30)
        finished = await durable_store.acquire(done.id, worker_id="w", lease_seconds=30)
        assert finished is not None
        await durable_store.settle(Settlement(finished.lease, WorkflowStatus.SUCCEEDED, output="1"))
        mine = [
            (r.queue, r.status, r.count)
            for r in await durable_store.backlog()
            if r.name in (name, done_name)
        ]
        assert mine == [
            ("default", WorkflowStatus.PENDING, 2),
            ("default", WorkflowStatus.RUNNING, 1),
            ("reports", WorkflowStatus.PENDING, 1),
        ]

    async def test_list_name_filter_is_exact(self, durable_store: Store) -> None:
        name = unique_name("Case")
        exact = await self.enqueue_one(durable_store, name=name)
        await self.enqueue_one(durable_store, name=name.lower())
        await self.enqueue_one(durable_store, name=name + ".more")
        assert [r.id for r in await durable_store.list_workflows(name=name)] == [exact]

    async def test_load_steps_of_unknown_workflow_is_empty(self, durable_store: Store) -> None:
        assert await durable_store.load_steps(new_workflow().id) == []

    async def test_load_steps_is_ordered_by_index(self, durable_store: Store) -> None:
        first = await self.acquired(durable_store)
        other = await self.acquired(durable_store)
        for index in (5, 0, 12, 3, 1, 2):
            await durable_store.start_step(first.lease, index, f"step-{index}", f'"in-{index}"')
            await durable_store.start_step(other.lease, index + 100, "other", '"other"')
        steps = await durable_store.load_steps(first.id)
        assert [s.step_index for s in steps] == [0, 1, 2, 3, 5, 12]
        assert [s.step_name for s in steps] == [f"step-{i}" for i in (0, 1, 2, 3, 5, 12)]
        assert [s.input for s in steps] == [f'"in-{i}"' for i in (0, 1, 2, 3, 5, 12)]

    # -- acquire --------------------------------------------------------------

    async def test_acquire_takes_the_lease(self, durable_store: Store) -> None:
        row = new_workflow(input='{"args":["x"],"kwargs":{}}', max_attempts=4)
        await durable_store.enqueue([row])
        claimed = await durable_store.acquire(row.id, worker_id="worker-a", lease_seconds=30)
        assert claimed is not None
        assert (claimed.id, claimed.name, claimed.input) == (row.id, row.name, row.input)
        assert (claimed.attempts, claimed.max_attempts) == (1, 4)
        assert claimed.lease.workflow_id == row.id
        assert claimed.lease.worker_id == "worker-a"
        assert claimed.lease.token
        if claimed.steps is not None:
            assert claimed.steps == ()
        got = await self.record(durable_store, row.id)
        assert got.status is WorkflowStatus.RUNNING
        assert (got.attempts, got.locked_by) == (1, "worker-a")
        self.assert_near_now(got.locked_until, offset=30)

    async def test_acquire_of_a_held_workflow_returns_none(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        again = await durable_store.acquire(claimed.id, worker_id="worker-b", lease_seconds=30)
        assert again is None
        got = await self.record(durable_store, claimed.id)
        assert (got.locked_by, got.attempts) == ("worker-a", 1)

    async def test_acquire_due_only_waits_for_run_at(self, durable_store: Store) -> None:
        workflow_id = await self.enqueue_one(durable_store, delay_seconds=60)
        assert await durable_store.acquire(workflow_id, worker_id="w", lease_seconds=30) is None
        assert (await self.record(durable_store, workflow_id)).status is WorkflowStatus.PENDING
        claimed = await durable_store.acquire(
            workflow_id, worker_id="w", lease_seconds=30, due_only=False
        )
        assert claimed is not None and claimed.attempts == 1

    async def test_acquire_reclaims_an_expired_lease(self, durable_store: Store) -> None:
        first = await self.acquired(durable_store, lease_seconds=self.short_lease)
        await self.expire()
        second = await durable_store.acquire(first.id, worker_id="worker-b", lease_seconds=30)
        assert second is not None
        assert second.attempts == 2
        assert second.lease.token != first.lease.token
        assert second.lease.worker_id == "worker-b"
        got = await self.record(durable_store, first.id)
        assert (got.status, got.attempts, got.locked_by) == (WorkflowStatus.RUNNING, 2, "worker-b")

    async def test_acquire_of_terminal_workflows_returns_none(self, durable_store: Store) -> None:
        succeeded = await self.acquired(durable_store)
        await durable_store.settle(
            Settlement(succeeded.lease, WorkflowStatus.SUCCEEDED, output="null")
        )
        failed = await self.acquired(durable_store)
        await durable_store.settle(Settlement(failed.lease, WorkflowStatus.FAILED, error="{}"))
        cancelled = await self.enqueue_one(durable_store)
        await durable_store.cancel_workflow(cancelled)
        for workflow_id in (succeeded.id, failed.id, cancelled):
            for due_only in (True, False):
                assert (
                    await durable_store.acquire(
                        workflow_id, worker_id="w", lease_seconds=30, due_only=due_only
                    )
                    is None
                )

    async def test_acquire_of_unknown_workflow_returns_none(self, durable_store: Store) -> None:
        assert (
            await durable_store.acquire(new_workflow().id, worker_id="w", lease_seconds=30) is None
        )

    async def test_each_acquire_counts_an_attempt_with_a_fresh_token(
        self, durable_store: Store
    ) -> None:
        claimed = await self.acquired(durable_store)
        tokens = {claimed.lease.token}
        for attempt in (2, 3):
            await durable_store.settle(
                Settlement(claimed.lease, WorkflowStatus.PENDING, error='"again"')
            )
            again = await durable_store.acquire(claimed.id, worker_id="worker-a", lease_seconds=30)
            assert again is not None
            assert again.attempts == attempt
            tokens.add(again.lease.token)
            claimed = again
        assert len(tokens) == 3

    # -- steps ----------------------------------------------------------------

    async def test_start_step_records_a_running_step(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "mod.fetch", '{"args":[1],"kwargs":{}}')
        (step,) = await durable_store.load_steps(claimed.id)
        assert (step.step_index, step.step_name, step.status) == (
            0,
            "mod.fetch",
            StepStatus.RUNNING,
        )
        assert (step.input, step.output, step.error, step.attempts) == (
            '{"args":[1],"kwargs":{}}',
            None,
            None,
            1,
        )

    async def test_complete_step_records_the_output(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "s", '"in"')
        await durable_store.complete_step(claimed.lease, 0, '{"ok":true}')
        (step,) = await durable_store.load_steps(claimed.id)
        assert (step.status, step.output, step.error) == (StepStatus.SUCCEEDED, '{"ok":true}', None)
        assert (step.input, step.attempts) == ('"in"', 1)

    async def test_fail_step_records_the_error(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "s", '"in"')
        await durable_store.fail_step(claimed.lease, 0, '{"type":"ValueError"}')
        (step,) = await durable_store.load_steps(claimed.id)
        assert (step.status, step.error, step.output) == (
            StepStatus.FAILED,
            '{"type":"ValueError"}',
            None,
        )

    async def test_start_step_again_resets_a_failed_step(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "s", '"first"')
        await durable_store.fail_step(claimed.lease, 0, '"boom"')
        await durable_store.settle(
            Settlement(claimed.lease, WorkflowStatus.PENDING, error='"boom"')
        )
        retry = await durable_store.acquire(claimed.id, worker_id="worker-a", lease_seconds=30)
        assert retry is not None
        await durable_store.start_step(retry.lease, 0, "s2", '"second"')
        (step,) = await durable_store.load_steps(claimed.id)
        assert (step.status, step.step_name, step.input) == (StepStatus.RUNNING, "s2", '"second"')
        assert (step.output, step.error, step.attempts) == (None, None, 2)
        await durable_store.complete_step(retry.lease, 0, '"done"')
        (step,) = await durable_store.load_steps(claimed.id)
        assert (step.status, step.output, step.error, step.attempts) == (
            StepStatus.SUCCEEDED,
            '"done"',
            None,
            2,
        )

    async def test_start_step_again_resets_a_running_step(self, durable_store: Store) -> None:
        crashed = await self.acquired(durable_store, lease_seconds=self.short_lease)
        await durable_store.start_step(crashed.lease, 0, "s", '"first"')
        await self.expire()
        rescuer = await durable_store.acquire(crashed.id, worker_id="worker-b", lease_seconds=30)
        assert rescuer is not None
        await durable_store.start_step(rescuer.lease, 0, "s", '"first"')
        (step,) = await durable_store.load_steps(crashed.id)
        assert (step.status, step.attempts, step.input) == (StepStatus.RUNNING, 2, '"first"')

    async def test_steps_are_kept_per_workflow(self, durable_store: Store) -> None:
        one = await self.acquired(durable_store)
        two = await self.acquired(durable_store)
        await durable_store.start_step(one.lease, 0, "s", '"one"')
        await durable_store.start_step(two.lease, 0, "s", '"two"')
        await durable_store.complete_step(one.lease, 0, '"out-one"')
        (step_one,) = await durable_store.load_steps(one.id)
        (step_two,) = await durable_store.load_steps(two.id)
        assert (step_one.input, step_one.output, step_one.status) == (
            '"one"',
            '"out-one"',
            StepStatus.SUCCEEDED,
        )
        assert (step_two.input, step_two.output, step_two.status) == (
            '"two"',
            None,
            StepStatus.RUNNING,
        )

    # -- step paths and failed tries --------------------------------------------

    async def test_each_step_row_keeps_its_path(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store, max_attempts=3)
        lease = claimed.lease
        await durable_store.start_step(lease, 0, "plain", '"in0"')
        await durable_store.complete_step(lease, 0, '"out0"')
        await durable_store.start_step(lease, 1, "branch", '"in1"', path="3.0.2")
        await durable_store.complete_step(lease, 1, '"out1"')
        await durable_store.record_step(lease, 2, "durable.send", '"in2"', "null", path="4.1")
        await durable_store.send(claimed.id, "t", '"m"', f"m-{claimed.id}")
        assert await durable_store.receive(lease, "t", 3, "durable.recv", "[]", path="4.0") == '"m"'
        await durable_store.start_step(lease, 4, "failing", '"in4"', path="5.1")
        await durable_store.fail_step(lease, 4, '"boom"')
        expected = [(0, None), (1, "3.0.2"), (2, "4.1"), (3, "4.0"), (4, "5.1")]
        steps = await durable_store.load_steps(claimed.id)
        assert [(s.step_index, s.path) for s in steps] == expected
        await durable_store.settle(Settlement(lease, WorkflowStatus.PENDING, error='"boom"'))
        again = await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30)
        assert again is not None
        cached = (
            again.steps if again.steps is not None else await durable_store.load_steps(again.id)
        )
        assert [(s.step_index, s.path) for s in cached] == expected, "the claim reads paths too"
        # A new try of the step writes its path again.
        await durable_store.start_step(again.lease, 4, "failing", '"in4"', path="5.2")
        assert (await durable_store.load_steps(claimed.id))[4].path == "5.2"

    async def test_a_fork_copies_the_paths_of_its_steps(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "s", '"in"', path="1.0")
        await durable_store.complete_step(claimed.lease, 0, '"out"')
        await durable_store.settle(Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="1"))
        source = await self.record(durable_store, claimed.id)
        fork = dataclasses.replace(new_workflow(), name=source.name, input=source.input)
        await durable_store.fork_workflow(fork, claimed.id, 1)
        [step] = await durable_store.load_steps(fork.id)
        assert (step.step_index, step.path, step.output) == (0, "1.0", '"out"')

    async def test_every_failed_try_of_a_step_is_kept(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store, max_attempts=5)
        assert await durable_store.load_step_tries(claimed.id) == []
        lease = claimed.lease
        await durable_store.start_step(lease, 0, "ok", '"in"')
        await durable_store.complete_step(lease, 0, '"out"')
        for n in (1, 2):
            await durable_store.start_step(lease, 1, "flaky", '"in"')
            await durable_store.fail_step(lease, 1, f'{{"type": "E", "message": "try {n}"}}')
        await durable_store.start_step(lease, 1, "flaky", '"in"')
        await durable_store.complete_step(lease, 1, '"done"')
        tries = await durable_store.load_step_tries(claimed.id)
        assert [(t.step_index, t.try_number, t.error) for t in tries] == [
            (1, 1, '{"type": "E", "message": "try 1"}'),
            (1, 2, '{"type": "E", "message": "try 2"}'),
        ]
        for one in tries:
            self.assert_near_now(one.started_at)
            self.assert_near_now(one.ended_at)
            assert one.started_at <= one.ended_at
        steps = await durable_store.load_steps(claimed.id)
        assert [(s.status, s.attempts, s.error) for s in steps] == [
            (StepStatus.SUCCEEDED, 1, None),
            (StepStatus.SUCCEEDED, 3, None),
        ]
        other = await self.acquired(durable_store)
        assert await durable_store.load_step_tries(other.id) == [], "tries are per workflow"

    async def test_a_step_failing_twice_then_succeeding_keeps_two_tries(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.FAILURES[key] = 2
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        assert (
            await self.runner(durable_store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        )
        tries = await handle.step_tries()
        assert [(t.step_index, t.try_number) for t in tries] == [(1, 1), (1, 2)]
        for one in tries:
            error = load_error(one.error)
            assert error is not None and error["type"].endswith("PlannedFailure")
            assert error["message"] == f"planned failure of step_two for {key}"
        assert [s.attempts for s in await handle.steps()] == [1, 3, 1]

    # -- heartbeat ------------------------------------------------------------

    async def test_heartbeat_extends_the_lease(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store, lease_seconds=self.short_lease)
        await durable_store.heartbeat(claimed.lease, 60)
        self.assert_near_now((await self.record(durable_store, claimed.id)).locked_until, offset=60)
        await self.expire()
        assert (
            await durable_store.acquire(claimed.id, worker_id="worker-b", lease_seconds=30) is None
        )
        await durable_store.heartbeat(claimed.lease, 60)

    # -- settle ---------------------------------------------------------------

    async def test_settle_succeeded(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.settle(
            Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output='{"total":3}')
        )
        got = await self.record(durable_store, claimed.id)
        assert (got.status, got.output, got.error) == (
            WorkflowStatus.SUCCEEDED,
            '{"total":3}',
            None,
        )
        assert (got.locked_by, got.locked_until, got.attempts) == (None, None, 1)
        self.assert_near_now(got.completed_at)
        assert await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30) is None

    async def test_settle_refuses_a_step(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        step = StepWrite(claimed.lease, 0, "s", StepStatus.SUCCEEDED, "[]", output="1")
        with pytest.raises(InvalidArgumentsError, match="group commit"):
            await durable_store.settle(
                Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="1", step=step)
            )
        got = await self.record(durable_store, claimed.id)
        assert got.status is WorkflowStatus.RUNNING
        assert await durable_store.load_steps(claimed.id) == []

    async def test_settle_failed(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.settle(
            Settlement(claimed.lease, WorkflowStatus.FAILED, error='{"type":"E"}')
        )
        got = await self.record(durable_store, claimed.id)
        assert (got.status, got.error, got.output) == (WorkflowStatus.FAILED, '{"type":"E"}', None)
        assert (got.locked_by, got.locked_until) == (None, None)
        self.assert_near_now(got.completed_at)
        assert await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30) is None

    async def test_settle_pending_schedules_a_retry(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.settle(
            Settlement(
                claimed.lease, WorkflowStatus.PENDING, error='{"n":1}', retry_delay_seconds=60
            )
        )
        got = await self.record(durable_store, claimed.id)
        assert (got.status, got.error, got.completed_at) == (
            WorkflowStatus.PENDING,
            '{"n":1}',
            None,
        )
        assert (got.locked_by, got.locked_until, got.attempts) == (None, None, 1)
        self.assert_near_now(got.run_at, offset=60)
        assert await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30) is None
        retry = await durable_store.acquire(
            claimed.id, worker_id="w", lease_seconds=30, due_only=False
        )
        assert retry is not None and retry.attempts == 2

    async def test_settle_pending_without_delay_is_due_at_once(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.settle(Settlement(claimed.lease, WorkflowStatus.PENDING, error='"e"'))
        retry = await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30)
        assert retry is not None and retry.attempts == 2

    # -- retry and cancel -----------------------------------------------------

    async def test_retry_puts_a_failed_workflow_back_with_its_steps(
        self, durable_store: Store
    ) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "s", '"in"')
        await durable_store.complete_step(claimed.lease, 0, '"cached"')
        await durable_store.settle(Settlement(claimed.lease, WorkflowStatus.FAILED, error='"boom"'))
        await durable_store.retry_workflow(claimed.id)
        got = await self.record(durable_store, claimed.id)
        assert (got.status, got.attempts, got.completed_at) == (WorkflowStatus.PENDING, 0, None)
        (step,) = await durable_store.load_steps(claimed.id)
        assert (step.status, step.output) == (StepStatus.SUCCEEDED, '"cached"')
        again = await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30)
        assert again is not None and again.attempts == 1

    async def test_retry_puts_a_cancelled_workflow_back(self, durable_store: Store) -> None:
        workflow_id = await self.enqueue_one(durable_store)
        await durable_store.cancel_workflow(workflow_id)
        await durable_store.retry_workflow(workflow_id)
        got = await self.record(durable_store, workflow_id)
        assert (got.status, got.attempts) == (WorkflowStatus.PENDING, 0)

    async def test_retry_refuses_workflows_that_have_not_stopped(
        self, durable_store: Store
    ) -> None:
        pending = await self.enqueue_one(durable_store)
        running = await self.acquired(durable_store)
        succeeded = await self.acquired(durable_store)
        await durable_store.settle(
            Settlement(succeeded.lease, WorkflowStatus.SUCCEEDED, output="1")
        )
        for workflow_id in (pending, running.id, succeeded.id):
            before = await snapshot(durable_store, workflow_id)
            with pytest.raises(InvalidStateError):
                await durable_store.retry_workflow(workflow_id)
            assert await snapshot(durable_store, workflow_id) == before

    async def test_retry_of_unknown_workflow_raises_not_found(self, durable_store: Store) -> None:
        with pytest.raises(WorkflowNotFoundError):
            await durable_store.retry_workflow(new_workflow().id)

    async def test_cancel_a_pending_workflow(self, durable_store: Store) -> None:
        workflow_id = await self.enqueue_one(durable_store)
        await durable_store.cancel_workflow(workflow_id)
        got = await self.record(durable_store, workflow_id)
        assert got.status is WorkflowStatus.CANCELLED
        self.assert_near_now(got.completed_at)
        assert (
            await durable_store.acquire(
                workflow_id, worker_id="w", lease_seconds=30, due_only=False
            )
            is None
        )

    async def test_cancel_a_running_workflow_revokes_its_lease(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "s", '"in"')
        await durable_store.complete_step(claimed.lease, 0, '"done"')
        await durable_store.start_step(claimed.lease, 1, "s", '"in"')
        await durable_store.cancel_workflow(claimed.id)
        with pytest.raises(LeaseLostError):
            await durable_store.complete_step(claimed.lease, 1, '"late"')
        with pytest.raises(LeaseLostError):
            await durable_store.settle(
                Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output='"late"')
            )
        got = await self.record(durable_store, claimed.id)
        assert (got.status, got.output, got.locked_by) == (WorkflowStatus.CANCELLED, None, None)
        done, interrupted = await durable_store.load_steps(claimed.id)
        assert (done.status, done.output) == (StepStatus.SUCCEEDED, '"done"')
        assert (interrupted.status, interrupted.output) == (StepStatus.CANCELLED, None)

    async def test_cancel_refuses_finished_workflows(self, durable_store: Store) -> None:
        succeeded = await self.acquired(durable_store)
        await durable_store.settle(
            Settlement(succeeded.lease, WorkflowStatus.SUCCEEDED, output="1")
        )
        failed = await self.acquired(durable_store)
        await durable_store.settle(Settlement(failed.lease, WorkflowStatus.FAILED, error="1"))
        cancelled = await self.enqueue_one(durable_store)
        await durable_store.cancel_workflow(cancelled)
        for workflow_id in (succeeded.id, failed.id, cancelled):
            before = await snapshot(durable_store, workflow_id)
            with pytest.raises(InvalidStateError):
                await durable_store.cancel_workflow(workflow_id)
            assert await snapshot(durable_store, workflow_id) == before

    async def test_cancel_of_unknown_workflow_raises_not_found(self, durable_store: Store) -> None:
        with pytest.raises(WorkflowNotFoundError):
            await durable_store.cancel_workflow(new_workflow().id)

    # -- forking --------------------------------------------------------------

    async def _with_steps(self, store: Store) -> ClaimedWorkflow:
        """A failed workflow whose steps 0 and 1 succeeded, 2 failed and 3 succeeded."""
        claimed = await self.acquired(store, input='{"args":["fork"],"kwargs":{}}', max_attempts=4)
        for index in range(4):
            await store.start_step(claimed.lease, index, f"s{index}", f'"in{index}"')
            if index == 2:
                await store.fail_step(claimed.lease, index, '"boom"')
            else:
                await store.complete_step(claimed.lease, index, f'"out{index}"')
        await store.settle(Settlement(claimed.lease, WorkflowStatus.FAILED, error='"boom"'))
        return claimed

    async def test_fork_copies_the_succeeded_steps_before_the_index(
        self, durable_store: Store
    ) -> None:
        source = await self._with_steps(durable_store)
        before = await snapshot(durable_store, source.id)
        copies = {}
        for before_step in (0, 1, 3, 9):
            fork = new_workflow(id=f"fork-{before_step}")
            fork = dataclasses.replace(fork, name=source.name, input=source.input, max_attempts=4)
            await durable_store.fork_workflow(fork, source.id, before_step)
            got = await self.record(durable_store, fork.id)
            assert (got.status, got.name, got.input) == (
                WorkflowStatus.PENDING,
                source.name,
                source.input,
            )
            assert (got.attempts, got.max_attempts, got.output, got.error) == (0, 4, None, None)
            copies[before_step] = await durable_store.load_steps(fork.id)
        assert await snapshot(durable_store, source.id) == before, "the source is unchanged"
        original = {step.step_index: step for step in before.steps}
        assert [[s.step_index for s in steps] for steps in copies.values()] == [
            [],
            [0],
            [0, 1],
            [0, 1, 3],
        ]
        for step in copies[9]:
            assert step == original[step.step_index]
        again = await durable_store.acquire("fork-3", worker_id="w", lease_seconds=30)
        assert again is not None and again.attempts == 1

    async def test_fork_under_a_taken_id_conflicts_and_writes_nothing(
        self, durable_store: Store
    ) -> None:
        source = await self._with_steps(durable_store)
        taken = await self.enqueue_one(durable_store)
        before = await snapshot(durable_store, taken)
        fork = new_workflow(id=taken)
        with pytest.raises(WorkflowConflictError):
            await durable_store.fork_workflow(fork, source.id, 2)
        assert await snapshot(durable_store, taken) == before

    async def test_a_fork_resumes_from_its_step(self, durable_store: Store, key: str) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        runner = self.runner(durable_store)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        fork = await DurableClient(durable_store).fork(handle.id, from_step=1)
        assert fork.id != handle.id
        assert await runner.run_until_complete(fork) is WorkflowStatus.SUCCEEDED
        assert await fork.output() == await handle.output()
        assert wfs.CALLS[key] == ["one", "two", "three", "two", "three"], "step 0 replayed"
        assert [s.attempts for s in await fork.steps()] == [1, 1, 1]

    # -- fencing --------------------------------------------------------------

    async def _stale_lease(self, store: Store, kind: str) -> tuple[Lease, Lease | None]:
        """A lease that no longer holds its workflow, and the lease that does (if any).

        The stale holder recorded step 0 (succeeded) and step 1 (running) first.
        """
        if kind == "unknown_workflow":
            return Lease(new_workflow().id, "token-of-nothing", "worker-a"), None
        lease_seconds = self.short_lease if kind == "reclaimed" else 30.0
        claimed = await self.acquired(store, lease_seconds=lease_seconds)
        stale = claimed.lease
        await store.start_step(stale, 0, "s0", '"in0"')
        await store.complete_step(stale, 0, '"out0"')
        await store.start_step(stale, 1, "s1", '"in1"')
        current: Lease | None = None
        if kind == "reclaimed":
            await self.expire()
            reclaimed = await store.acquire(claimed.id, worker_id="worker-b", lease_seconds=30)
            assert reclaimed is not None
            current = reclaimed.lease
        elif kind == "settled":
            await store.settle(Settlement(stale, WorkflowStatus.SUCCEEDED, output='"done"'))
        elif kind == "cancelled":
            await store.cancel_workflow(claimed.id)
        elif kind == "forged":
            current = stale
            stale = Lease(claimed.id, "forged-" + stale.token[:20], stale.worker_id)
        else:
            raise AssertionError(kind)
        return stale, current

    @staticmethod
    def _write(store: Store, lease: Lease, write: str) -> Callable[[], Awaitable[None]]:
        operations: dict[str, Callable[[], Awaitable[None]]] = {
            "start_step_new_index": lambda: store.start_step(lease, 2, "s2", '"stale"'),
            "start_step_existing_index": lambda: store.start_step(lease, 0, "s0", '"stale"'),
            "complete_step": lambda: store.complete_step(lease, 1, '"stale"'),
            "fail_step": lambda: store.fail_step(lease, 1, '"stale"'),
            "heartbeat": lambda: store.heartbeat(lease, 3600),
            "settle_succeeded": lambda: store.settle(
                Settlement(lease, WorkflowStatus.SUCCEEDED, output='"stale"')
            ),
            "settle_failed": lambda: store.settle(
                Settlement(lease, WorkflowStatus.FAILED, error='"stale"')
            ),
            "settle_pending": lambda: store.settle(
                Settlement(lease, WorkflowStatus.PENDING, error='"stale"', retry_delay_seconds=0)
            ),
        }
        return operations[write]

    @pytest.mark.parametrize("kind", _STALE_KINDS)
    @pytest.mark.parametrize("write", _WRITES)
    async def test_a_lease_that_lost_the_workflow_cannot_write(
        self, durable_store: Store, kind: str, write: str
    ) -> None:
        stale, current = await self._stale_lease(durable_store, kind)
        before = await snapshot(durable_store, stale.workflow_id)
        with pytest.raises(LeaseLostError):
            await self._write(durable_store, stale, write)()
        assert await snapshot(durable_store, stale.workflow_id) == before
        if current is not None:
            await durable_store.heartbeat(current, 30)
            await durable_store.complete_step(current, 1, '"current"')
            steps = await durable_store.load_steps(stale.workflow_id)
            assert (steps[1].status, steps[1].output) == (StepStatus.SUCCEEDED, '"current"')

    # -- the engine's rules, driven through the real executor -----------------

    def runner(self, store: Store) -> WorkflowRunner:
        return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0), worker_id="contract")

    @pytest.fixture
    def key(self) -> Iterator[str]:
        """A fresh key for the contract workflows, forgotten afterwards."""
        value = unique_name("key")
        yield value
        wfs.forget(value)

    async def test_workflow_runs_to_success_with_its_steps_recorded(
        self, durable_store: Store, key: str
    ) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        assert (
            await self.runner(durable_store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        )
        assert await handle.output() == [f"{key}:1", f"{key}:1:2", f"{key}:1:2:3"]
        steps = await durable_store.load_steps(handle.id)
        assert [(s.step_index, s.step_name, s.status) for s in steps] == [
            (0, wfs.step_one.name, StepStatus.SUCCEEDED),
            (1, wfs.step_two.name, StepStatus.SUCCEEDED),
            (2, wfs.step_three.name, StepStatus.SUCCEEDED),
        ]
        assert steps[0].input == encode_arguments((key,), {}, what="input")
        assert wfs.CALLS[key] == ["one", "two", "three"]
        assert (await self.record(durable_store, handle.id)).attempts == 1

    async def test_retry_replays_cached_steps_and_reruns_the_failed_one(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        steps = await durable_store.load_steps(handle.id)
        assert [s.status for s in steps] == [StepStatus.SUCCEEDED, StepStatus.FAILED]
        assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED
        assert wfs.CALLS[key] == ["one", "two", "two", "three"]
        steps = await durable_store.load_steps(handle.id)
        assert [(s.status, s.attempts) for s in steps] == [
            (StepStatus.SUCCEEDED, 1),
            (StepStatus.SUCCEEDED, 2),
            (StepStatus.SUCCEEDED, 1),
        ]
        assert (await self.record(durable_store, handle.id)).attempts == 2

    async def test_a_step_left_running_by_a_crash_reruns(
        self, durable_store: Store, key: str
    ) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        crashed = await durable_store.acquire(
            handle.id, worker_id="crashed", lease_seconds=self.short_lease
        )
        assert crashed is not None
        step_input = encode_arguments((key,), {}, what="input")
        await durable_store.start_step(crashed.lease, 0, wfs.step_one.name, step_input)
        await self.expire()
        assert await self.runner(durable_store).run_once(handle) is WorkflowStatus.SUCCEEDED
        assert wfs.CALLS[key] == ["one", "two", "three"]
        steps = await durable_store.load_steps(handle.id)
        assert (steps[0].status, steps[0].attempts) == (StepStatus.SUCCEEDED, 2)
        assert (await self.record(durable_store, handle.id)).attempts == 2

    async def test_a_replayed_step_with_a_different_input_fails_the_workflow(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.NONCE[key], wfs.FAILURES[key] = "first", 1
        handle = await DurableClient(durable_store).start_workflow(wfs.drifting, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        wfs.NONCE[key] = "second"
        assert await runner.run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and error["type"].endswith("StepInputMismatchError")
        assert wfs.CALLS[key] == ["echo", "two"]
        (cached, _failed) = await durable_store.load_steps(handle.id)
        assert cached.status is StepStatus.SUCCEEDED
        assert "first" in cached.input and "second" not in cached.input

    async def test_a_different_step_at_a_cached_index_fails_the_workflow(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.BRANCH[key], wfs.FAILURES[key] = True, 1
        handle = await DurableClient(durable_store).start_workflow(wfs.branching, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        wfs.BRANCH[key] = False
        assert await runner.run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and error["type"].endswith("StepNameMismatchError")
        assert wfs.CALLS[key] == ["a", "two"]

    async def test_the_attempt_budget_ends_in_failed(self, durable_store: Store, key: str) -> None:
        wfs.FAILURES[key] = 99
        client = DurableClient(durable_store, max_attempts=2)
        handle = await client.start_workflow(wfs.three_steps, key)
        assert await self.runner(durable_store).run_until_complete(handle) is WorkflowStatus.FAILED
        got = await self.record(durable_store, handle.id)
        assert (got.attempts, got.max_attempts) == (2, 2)
        error = await handle.error()
        assert error is not None and error["type"].endswith("PlannedFailure")
        assert error["step_index"] == 1
        assert wfs.CALLS[key] == ["one", "two", "two"]

    async def test_retry_workflow_resumes_from_the_cache(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store, max_attempts=1).start_workflow(
            wfs.three_steps, key
        )
        runner = self.runner(durable_store)
        assert await runner.run_until_complete(handle) is WorkflowStatus.FAILED
        await durable_store.retry_workflow(handle.id)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        assert wfs.CALLS[key] == ["one", "two", "two", "three"]

    async def test_a_corrupted_input_fails_the_workflow(
        self, durable_store: Store, durable_tamper: Tamper, key: str
    ) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        await durable_tamper("workflows", "input", "{not json", workflow_id=handle.id)
        assert await self.runner(durable_store).run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and "Serialization" in error["type"]
        assert (await self.record(durable_store, handle.id)).attempts == 1
        assert wfs.CALLS[key] == []

    async def test_a_corrupted_cached_output_fails_the_workflow(
        self, durable_store: Store, durable_tamper: Tamper, key: str
    ) -> None:
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        await durable_tamper(
            "workflow_steps",
            "output",
            '{"__durable__": "nonsense"}',
            workflow_id=handle.id,
            step_index=0,
        )
        assert await runner.run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and "Serialization" in error["type"]
        assert wfs.CALLS[key] == ["one", "two"]

    async def test_odd_values_replay_equal_and_of_the_same_type(
        self, durable_store: Store, key: str
    ) -> None:
        value = {
            "text": ODD_TEXTS["emoji"] + ODD_TEXTS["control"],
            "tuple": (1, "two", 3.5),
            "when": datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
            "nested": [[[[{"deep": ("x", None)}]]]],
            "big": 2**70,
        }
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store).start_workflow(wfs.echo, key, value)
        assert (
            await self.runner(durable_store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        )
        assert wfs.CALLS[key] == ["echo", "two", "two"]
        result = await handle.output()
        assert result == value
        assert isinstance(result, dict) and type(result["tuple"]) is tuple
        assert type(result["when"]) is datetime

    # -- payloads are stored as text, exactly ---------------------------------

    async def _round_trip(self, store: Store, text: str) -> None:
        row = new_workflow(input=text)
        await store.enqueue([row])
        claimed = await store.acquire(row.id, worker_id="w", lease_seconds=30)
        assert claimed is not None and claimed.input == text
        await store.start_step(claimed.lease, 0, "step", text)
        await store.complete_step(claimed.lease, 0, text)
        await store.start_step(claimed.lease, 1, "step", text)
        await store.fail_step(claimed.lease, 1, text)
        await store.settle(Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output=text))
        got = await self.record(store, row.id)
        assert got.input == text
        assert got.output == text
        zero, one = await store.load_steps(row.id)
        assert (zero.input, zero.output) == (text, text)
        assert (one.input, one.error) == (text, text)
        failed = await self.acquired(store)
        await store.settle(Settlement(failed.lease, WorkflowStatus.FAILED, error=text))
        assert (await self.record(store, failed.id)).error == text

    @pytest.mark.parametrize("kind", sorted(ODD_TEXTS))
    async def test_odd_text_is_stored_exactly(self, durable_store: Store, kind: str) -> None:
        await self._round_trip(durable_store, ODD_TEXTS[kind])

    async def test_empty_text_stays_empty_not_null(self, durable_store: Store) -> None:
        await self._round_trip(durable_store, "")

    async def test_large_values_are_stored_exactly(self, durable_store: Store) -> None:
        for megabytes in self.big_payload_megabytes:
            text = big_text(megabytes)
            assert len(text.encode()) >= megabytes * 990_000
            row = new_workflow(input=text)
            await durable_store.enqueue([row])
            claimed = await durable_store.acquire(row.id, worker_id="w", lease_seconds=30)
            assert claimed is not None and claimed.input == text
            await durable_store.start_step(claimed.lease, 0, "big", text)
            await durable_store.complete_step(claimed.lease, 0, text)
            await durable_store.settle(
                Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output=text)
            )
            (step,) = await durable_store.load_steps(row.id)
            assert step.input == text and step.output == text
            assert (await self.record(durable_store, row.id)).output == text

    # -- concurrency ----------------------------------------------------------

    async def test_concurrent_writers_all_persist(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        name = unique_name("concurrent")
        stores = (durable_store, durable_second_store)
        done: list[str] = []
        errors: list[BaseException] = []

        async def writer(number: int) -> None:
            store = stores[number % 2]
            row = new_workflow(name, input=f'{{"n":{number}}}')
            # Errors are collected, not raised: a failing writer must not cancel the
            # others mid-query (which can leave some drivers, aiosqlite, hanging).
            try:
                await store.enqueue([row])
                claimed = await store.acquire(row.id, worker_id=f"w{number}", lease_seconds=30)
                assert claimed is not None
                for index in range(3):
                    input = f'"{number}-{index}"'
                    await store.start_step(claimed.lease, index, f"s{index}", input)
                    await store.heartbeat(claimed.lease, 30)
                    await store.complete_step(claimed.lease, index, f'"out-{number}-{index}"')
                await store.settle(
                    Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output=f"{number}")
                )
            except Exception as exc:
                errors.append(exc)
            else:
                done.append(row.id)

        with anyio.fail_after(SAFETY_SECONDS):
            async with anyio.create_task_group() as group:
                for number in range(self.concurrent_writers):
                    group.start_soon(writer, number)
        assert errors == []
        assert len(done) == self.concurrent_writers
        listed = await durable_store.list_workflows(name=name, limit=1000)
        assert {r.id for r in listed} == set(done)
        for record in listed:
            assert record.status is WorkflowStatus.SUCCEEDED
            number = int(record.output or "-1")
            steps = await durable_second_store.load_steps(record.id)
            assert [(s.input, s.output, s.status) for s in steps] == [
                (f'"{number}-{i}"', f'"out-{number}-{i}"', StepStatus.SUCCEEDED) for i in range(3)
            ]

    async def test_concurrent_batch_enqueues_all_persist(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        name = unique_name("batches")
        batches = [[new_workflow(name) for _ in range(25)] for _ in range(10)]
        stores = (durable_store, durable_second_store)
        with anyio.fail_after(SAFETY_SECONDS):
            async with anyio.create_task_group() as group:
                for number, batch in enumerate(batches):
                    group.start_soon(stores[number % 2].enqueue, batch)
        listed = await durable_store.list_workflows(name=name, limit=1000)
        assert {r.id for r in listed} == {row.id for batch in batches for row in batch}

    async def test_concurrent_acquires_have_one_winner(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        workflow_id = await self.enqueue_one(durable_store)
        stores = (durable_store, durable_second_store)
        results: list[ClaimedWorkflow | None] = []

        async def contender(number: int) -> None:
            results.append(
                await stores[number % 2].acquire(
                    workflow_id, worker_id=f"w{number}", lease_seconds=30
                )
            )

        with anyio.fail_after(SAFETY_SECONDS):
            async with anyio.create_task_group() as group:
                for number in range(10):
                    group.start_soon(contender, number)
        winners = [r for r in results if r is not None]
        assert len(results) == 10 and len(winners) == 1
        got = await self.record(durable_store, workflow_id)
        assert (got.attempts, got.locked_by) == (1, winners[0].lease.worker_id)

    async def test_heartbeats_run_alongside_step_writes(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        claimed = await self.acquired(durable_store)
        stop = anyio.Event()
        beats = 0

        async def heartbeat() -> None:
            nonlocal beats
            while not stop.is_set():
                await durable_second_store.heartbeat(claimed.lease, 30)
                beats += 1
                await anyio.lowlevel.checkpoint()

        with anyio.fail_after(SAFETY_SECONDS):
            async with anyio.create_task_group() as group:
                group.start_soon(heartbeat)
                try:
                    for index in range(10):
                        await durable_store.start_step(claimed.lease, index, "s", f"{index}")
                        await durable_store.complete_step(claimed.lease, index, f"{index}")
                finally:
                    # Let the heartbeats end on their own: cancelling a query mid-flight
                    # can leave some drivers (aiosqlite) waiting forever.
                    stop.set()
        assert beats > 0
        steps = await durable_store.load_steps(claimed.id)
        assert [(s.step_index, s.status) for s in steps] == [
            (i, StepStatus.SUCCEEDED) for i in range(10)
        ]

    # -- bad input and corruption ---------------------------------------------

    async def test_a_corrupted_workflow_status_is_reported(
        self, durable_store: Store, durable_tamper: Tamper
    ) -> None:
        name = unique_name("corrupt")
        workflow_id = await self.enqueue_one(durable_store, name=name)
        await durable_tamper("workflows", "status", "exploded", workflow_id=workflow_id)
        with pytest.raises(CorruptRecordError, match="exploded"):
            await durable_store.get_workflow(workflow_id)
        with pytest.raises(CorruptRecordError):
            await durable_store.list_workflows(name=name)

    async def test_a_corrupted_step_status_is_reported(
        self, durable_store: Store, durable_tamper: Tamper
    ) -> None:
        claimed = await self.acquired(durable_store)
        await durable_store.start_step(claimed.lease, 0, "s", '"in"')
        await durable_tamper(
            "workflow_steps", "status", "melted", workflow_id=claimed.id, step_index=0
        )
        with pytest.raises(CorruptRecordError, match="melted"):
            await durable_store.load_steps(claimed.id)
