"""``AdminContract``: an operator's writes (:class:`~durable_core.seams.roles.AdminStore`):
the backlog, retry, cancel and fork.
"""

from __future__ import annotations

import dataclasses

import pytest

from ..codec.failures import load_error
from ..errors import (
    InvalidStateError,
    LeaseLostError,
    WorkflowConflictError,
    WorkflowNotFoundError,
)
from ..seams.records import (
    ClaimedWorkflow,
    Settlement,
    StepStatus,
    WorkflowStatus,
)
from ..seams.store import Store
from .base import ContractBase
from .support import (
    new_workflow,
    snapshot,
    unique_name,
)


class AdminContract(ContractBase):
    """Tests for an :class:`~durable_core.seams.roles.AdminStore` (with the caller, run and
    attempt roles to set rows up)."""

    # -- backlog ---------------------------------------------------------------

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

    # -- the attempts a cancel records ------------------------------------------

    async def test_a_cancel_records_a_cancellation_and_the_attempts_keep_earlier_errors(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store, max_attempts=5)
        failed = '{"type": "builtins.ConnectionError", "message": "gateway down"}'
        await durable_store.settle(Settlement(claimed.lease, WorkflowStatus.PENDING, error=failed))
        await durable_store.cancel_workflow(claimed.id)
        error = load_error((await self._row(durable_store, claimed.id)).error)
        assert error is not None
        assert (error["type"], error["message"]) == (
            "durable_core.errors.WorkflowCancelledError",
            f"workflow {claimed.id} was cancelled",
        )
        [attempt] = await durable_store.load_attempts(claimed.id)
        assert (attempt.outcome, attempt.error) == ("retry", failed)
        other = await self._held(durable_store)
        await durable_store.cancel_workflow(other.id, '{"type": "timeout"}')
        assert (await self._row(durable_store, other.id)).error == '{"type": "timeout"}'

    async def test_children_cancelled_with_their_parent_say_so(self, durable_store: Store) -> None:
        parent, running = await self._parent_and_child(durable_store)
        pending = dataclasses.replace(new_workflow(), parent_id=parent.id)
        await durable_store.enqueue([pending])
        await durable_store.cancel_workflow(parent.id)
        for workflow_id, message in [
            (parent.id, f"workflow {parent.id} was cancelled"),
            (running.id, f"workflow {running.id} was cancelled with its parent {parent.id}"),
            (
                pending.id,
                f"workflow {pending.id} was cancelled with its parent {pending.parent_id}",
            ),
        ]:
            error = load_error((await self._row(durable_store, workflow_id)).error)
            assert error is not None
            assert error["type"] == "durable_core.errors.WorkflowCancelledError"
            assert error["message"] == message
        # A reason (a timeout's) is every cancelled child's record too.
        timed_out, child = await self._parent_and_child(durable_store)
        await durable_store.cancel_workflow(timed_out.id, '{"type": "timeout"}')
        for workflow_id in (timed_out.id, child.id):
            assert (await self._row(durable_store, workflow_id)).error == '{"type": "timeout"}'
