"""``RunContract``: running one given workflow (:class:`~durable_core.seams.roles.RunStore`):
acquire, heartbeat, the attempts recorded, concurrent writers, corrupted rows.
"""

from __future__ import annotations

from datetime import timedelta

import anyio
import anyio.lowlevel
import pytest

from ..errors import (
    CorruptRecordError,
    LeaseLostError,
)
from ..seams.records import (
    ClaimedWorkflow,
    Settlement,
    StepStatus,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.store import Store
from .base import ContractBase
from .support import (
    SAFETY_SECONDS,
    Tamper,
    new_workflow,
    unique_name,
)


class RunContract(ContractBase):
    """Tests for a :class:`~durable_core.seams.roles.RunStore` (with the caller and attempt
    roles to set rows up)."""

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

    async def test_enqueue_repeated_start_is_a_no_op(self, durable_store: Store) -> None:
        row = new_workflow(input='{"args":["once"],"kwargs":{}}')
        assert list(await durable_store.enqueue([row])) == [row.id]
        claimed = await durable_store.acquire(row.id, worker_id="w", lease_seconds=30)
        assert claimed is not None
        fresh = new_workflow()
        assert list(await durable_store.enqueue([row, fresh, row])) == [fresh.id]
        found = await self.record(durable_store, row.id)
        assert (found.status, found.attempts) == (WorkflowStatus.RUNNING, 1), "left as it was"

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

    async def test_heartbeat_extends_the_lease(self, durable_store: Store) -> None:
        claimed = await self.acquired(durable_store, lease_seconds=self.short_lease)
        await durable_store.heartbeat(claimed.lease, 60)
        self.assert_near_now((await self.record(durable_store, claimed.id)).locked_until, offset=60)
        await self.expire()
        assert (
            await durable_store.acquire(claimed.id, worker_id="worker-b", lease_seconds=30) is None
        )
        await durable_store.heartbeat(claimed.lease, 60)

    # -- attempt history -------------------------------------------------------------

    async def test_every_ended_attempt_is_kept_in_order(self, durable_store: Store) -> None:
        first = await self._held(durable_store, max_attempts=5)
        await durable_store.settle(Settlement(first.lease, WorkflowStatus.PENDING, error='"boom"'))
        second = await durable_store.acquire(first.id, worker_id="w2", lease_seconds=0.05)
        assert second is not None and second.crashed is None
        await anyio.sleep(0.2)  # its lease expires: the next acquire takes over from a crash
        third = await durable_store.acquire(first.id, worker_id="w3", lease_seconds=30)
        assert third is not None and third.crashed is not None
        assert (third.crashed.worker_id, third.crashed.attempt) == ("w2", 2)
        assert third.crashed_at is not None
        await durable_store.record_attempt(third.crashed, "crashed", '"x"', third.crashed_at)
        await durable_store.settle(Settlement(third.lease, WorkflowStatus.SUCCEEDED, output="3"))
        history = await durable_store.load_attempts(first.id)
        assert [(a.attempt, a.worker, a.outcome, a.error) for a in history] == [
            (1, "waiter", "retry", '"boom"'),
            (2, "w2", "crashed", '"x"'),
            (3, "w3", "succeeded", None),
        ]
        assert history[0].started_at is not None and history[0].started_at <= history[0].ended_at
        assert abs(history[1].ended_at - third.crashed_at) < timedelta(seconds=1)
        # Retrying by hand keeps the history; a stale lease writes none.
        with pytest.raises(LeaseLostError):
            await durable_store.settle(
                Settlement(second.lease, WorkflowStatus.FAILED, error='"late"')
            )
        assert len(await durable_store.load_attempts(first.id)) == 3

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

    # -- corruption -----------------------------------------------------------

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
