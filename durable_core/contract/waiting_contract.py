"""``WaitingContract``: what a store must do for workflows that wait: suspending and
waking, messages, events and children, as store operations (schema version 3). The same
through the executor is in :mod:`~durable_core.contract.engine_contract`.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from ..errors import (
    FrameworkError,
    LeaseLostError,
)
from ..seams.records import (
    Settlement,
    StepStatus,
    WaitKind,
    WorkflowStatus,
)
from ..seams.store import Store
from .base import ContractBase, wait_for
from .support import (
    new_workflow,
)


class WaitingContract(ContractBase):
    """Tests for the waiting operations (of the attempt, run and caller roles);
    :class:`~durable_core.contract.StoreContract` includes them."""

    async def test_suspend_releases_the_lease_and_does_not_count_an_attempt(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        deadline = datetime.now(UTC) + timedelta(hours=1)
        wait = wait_for(WaitKind.SLEEP, deadline=deadline, output='"deadline"')
        assert await durable_store.suspend(claimed.lease, [wait]) is True
        row = await self._row(durable_store, claimed.id)
        assert (row.status, row.waiting_for, row.attempts) == (WorkflowStatus.WAITING, "sleep", 0)
        assert row.locked_by is None and row.locked_until is None
        assert row.wake_at is not None and abs(row.wake_at - deadline) < timedelta(seconds=1)
        [step] = await durable_store.load_steps(claimed.id)
        assert (step.step_name, step.status, step.output) == (
            "durable.sleep",
            StepStatus.WAITING,
            '"deadline"',
        )
        with pytest.raises(LeaseLostError):
            await durable_store.heartbeat(claimed.lease, 30)
        assert await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30) is None
        # Run before its deadline (a test runner may), it is one attempt again.
        again = await durable_store.acquire(
            claimed.id, worker_id="w", lease_seconds=30, due_only=False
        )
        assert again is not None and again.attempts == 1
        assert [s.status for s in again.steps or await durable_store.load_steps(claimed.id)] == [
            StepStatus.WAITING
        ]

    async def test_a_waiting_workflow_is_due_at_its_deadline(self, durable_store: Store) -> None:
        claimed = await self._held(durable_store)
        deadline = datetime.now(UTC) + timedelta(seconds=0.2)
        wait = wait_for(WaitKind.SLEEP, deadline=deadline)
        assert await durable_store.suspend(claimed.lease, [wait])
        row = await self._row(durable_store, claimed.id)
        assert row.wake_at is not None and abs(row.wake_at - deadline) < timedelta(seconds=1)
        await self._acquired_once_due(durable_store, claimed.id)

    async def test_a_message_wait_with_no_deadline_waits_forever(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        assert await durable_store.suspend(claimed.lease, [wait_for(WaitKind.MESSAGE, "t")])
        row = await self._row(durable_store, claimed.id)
        assert (row.waiting_for, row.wake_at) == ("message:t", None)
        assert await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30) is None

    async def test_a_stale_lease_cannot_suspend(self, durable_store: Store) -> None:
        claimed = await self._held(durable_store)
        await durable_store.cancel_workflow(claimed.id)
        with pytest.raises(LeaseLostError):
            await durable_store.suspend(claimed.lease, [wait_for(WaitKind.SLEEP)])
        row = await self._row(durable_store, claimed.id)
        assert row.status is WorkflowStatus.CANCELLED
        assert await durable_store.load_steps(claimed.id) == []

    async def test_a_message_already_there_refuses_the_suspension(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        await durable_store.send(claimed.id, "t", '"early"', "m-early")
        assert not await durable_store.suspend(claimed.lease, [wait_for(WaitKind.MESSAGE, "t")])
        row = await self._row(durable_store, claimed.id)
        assert (row.status, row.attempts) == (WorkflowStatus.RUNNING, 1)
        assert await durable_store.load_steps(claimed.id) == [], (
            "a refused suspension writes nothing"
        )
        await durable_store.heartbeat(claimed.lease, 30)  # the lease still holds

    async def test_a_send_wakes_a_workflow_waiting_on_its_topic_only(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        assert await durable_store.suspend(claimed.lease, [wait_for(WaitKind.MESSAGE, "t")])
        await durable_store.send(claimed.id, "other", '"no"', "m-other")
        assert (await self._row(durable_store, claimed.id)).status is WorkflowStatus.WAITING
        await durable_store.send(claimed.id, "t", '"yes"', "m-yes")
        row = await self._row(durable_store, claimed.id)
        assert (row.status, row.waiting_for) == (WorkflowStatus.PENDING, None)
        again = await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30)
        assert again is not None and again.attempts == 1

    async def test_several_waits_suspend_until_the_soonest_deadline(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        soon = datetime.now(UTC) + timedelta(hours=1)
        waits = [
            wait_for(WaitKind.MESSAGE, "a", soon + timedelta(hours=1), index=0, path="1.0"),
            wait_for(WaitKind.MESSAGE, "b", index=1, path="1.1"),
            wait_for(WaitKind.SLEEP, deadline=soon, index=2, output='"soon"', path="1.2"),
        ]
        assert await durable_store.suspend(claimed.lease, waits) is True
        row = await self._row(durable_store, claimed.id)
        assert (row.status, row.waiting_for, row.attempts) == (WorkflowStatus.WAITING, "any:3", 0)
        assert row.wake_at is not None and abs(row.wake_at - soon) < timedelta(seconds=1)
        assert row.wait_description is not None and "3 waits" in row.wait_description
        assert row.locked_by is None
        steps = await durable_store.load_steps(claimed.id)
        assert [(s.step_index, s.step_name, s.status, s.output, s.path) for s in steps] == [
            (0, "durable.message", StepStatus.WAITING, "null", "1.0"),
            (1, "durable.message", StepStatus.WAITING, "null", "1.1"),
            (2, "durable.sleep", StepStatus.WAITING, '"soon"', "1.2"),
        ]
        with pytest.raises(LeaseLostError):
            await durable_store.heartbeat(claimed.lease, 30)
        assert await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30) is None

    async def test_suspending_on_no_wait_is_refused(self, durable_store: Store) -> None:
        claimed = await self._held(durable_store)
        with pytest.raises(FrameworkError):
            await durable_store.suspend(claimed.lease, [])
        assert (await self._row(durable_store, claimed.id)).status is WorkflowStatus.RUNNING

    async def test_a_message_on_any_waited_topic_refuses_the_suspension(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        await durable_store.send(claimed.id, "b", '"early"', "m-early-b")
        waits = [
            wait_for(WaitKind.SLEEP, deadline=datetime.now(UTC) + timedelta(hours=1), index=0),
            wait_for(WaitKind.MESSAGE, "a", index=1),
            wait_for(WaitKind.MESSAGE, "b", index=2),
        ]
        assert not await durable_store.suspend(claimed.lease, waits)
        row = await self._row(durable_store, claimed.id)
        assert (row.status, row.attempts, row.waiting_for) == (WorkflowStatus.RUNNING, 1, None)
        assert await durable_store.load_steps(claimed.id) == [], (
            "a refused suspension writes nothing"
        )
        await durable_store.heartbeat(claimed.lease, 30)  # the lease still holds
        assert await durable_store.receive(claimed.lease, "b", 2, "durable.recv", "[]") == (
            '"early"'
        )

    async def test_a_stale_lease_cannot_suspend_on_several_waits(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        await durable_store.cancel_workflow(claimed.id)
        waits = [wait_for(WaitKind.SLEEP, index=0), wait_for(WaitKind.MESSAGE, "t", index=1)]
        with pytest.raises(LeaseLostError):
            await durable_store.suspend(claimed.lease, waits)
        assert await durable_store.load_steps(claimed.id) == []

    async def test_a_message_on_one_topic_wakes_a_workflow_waiting_on_several(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        waits = [wait_for(WaitKind.MESSAGE, "a", index=0), wait_for(WaitKind.MESSAGE, "b", index=1)]
        assert await durable_store.suspend(claimed.lease, waits)
        assert (await self._row(durable_store, claimed.id)).waiting_for == "any:2"
        await durable_store.send(claimed.id, "b", '"yes"', "m-yes-b")
        row = await self._row(durable_store, claimed.id)
        assert (row.status, row.waiting_for) == (WorkflowStatus.PENDING, None)
        again = await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30)
        assert again is not None and again.attempts == 1
        assert await durable_store.receive(again.lease, "b", 1, "durable.recv", "[]") == '"yes"'

    async def test_a_sleep_only_multi_wait_is_due_at_its_soonest_deadline(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        soon = datetime.now(UTC) + timedelta(seconds=0.2)
        waits = [
            wait_for(WaitKind.SLEEP, deadline=soon + timedelta(hours=1), index=0),
            wait_for(WaitKind.SLEEP, deadline=soon, index=1),
        ]
        assert await durable_store.suspend(claimed.lease, waits)
        row = await self._row(durable_store, claimed.id)
        assert row.waiting_for == "any:2"
        assert row.wake_at is not None and abs(row.wake_at - soon) < timedelta(seconds=1)
        again = await self._acquired_once_due(durable_store, claimed.id)
        assert again.attempts == 1

    async def test_receive_takes_messages_in_order_once_per_topic(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        lease = claimed.lease
        for n, topic in enumerate(["a", "b", "a", "a"]):
            await durable_store.send(claimed.id, topic, json.dumps(n), f"m{n}-{claimed.id}")
        await durable_store.send(claimed.id, "a", '"repeat"', f"m0-{claimed.id}")  # no-op
        taken = [
            await durable_store.receive(lease, "a", i, "durable.recv", '["a"]') for i in range(4)
        ]
        assert taken == ["0", "2", "3", None]
        assert await durable_store.receive(lease, "b", 4, "durable.recv", '["b"]') == "1"
        steps = await durable_store.load_steps(claimed.id)
        assert [(s.step_index, s.status, s.output) for s in steps] == [
            (0, StepStatus.SUCCEEDED, "0"),
            (1, StepStatus.SUCCEEDED, "2"),
            (2, StepStatus.SUCCEEDED, "3"),
            (4, StepStatus.SUCCEEDED, "1"),
        ]

    async def test_a_redelivery_after_the_message_was_taken_sends_nothing(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        key = f"evt-{claimed.id}"
        await durable_store.send(claimed.id, "paid", '"first"', key)
        assert await durable_store.receive(claimed.lease, "paid", 0, "durable.recv", "[]") == (
            '"first"'
        )
        await durable_store.send(claimed.id, "paid", '"again"', key)  # the webhook, redelivered
        assert await durable_store.receive(claimed.lease, "paid", 1, "durable.recv", "[]") is None

    async def test_a_stale_lease_cannot_receive_and_the_message_stays(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store, max_attempts=5)
        await durable_store.send(claimed.id, "t", '"kept"', "m-kept")
        await durable_store.settle(Settlement(claimed.lease, WorkflowStatus.PENDING, error='"x"'))
        with pytest.raises(LeaseLostError):
            await durable_store.receive(claimed.lease, "t", 0, "durable.recv", '["t"]')
        again = await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30)
        assert again is not None
        assert await durable_store.receive(again.lease, "t", 0, "durable.recv", '["t"]') == '"kept"'

    async def test_record_step_is_one_fenced_write(self, durable_store: Store) -> None:
        claimed = await self._held(durable_store)
        await durable_store.record_step(claimed.lease, 3, "durable.send", '["x"]', "null")
        [step] = await durable_store.load_steps(claimed.id)
        assert (step.step_index, step.status, step.input, step.output) == (
            3,
            StepStatus.SUCCEEDED,
            '["x"]',
            "null",
        )
        await durable_store.settle(Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="1"))
        with pytest.raises(LeaseLostError):
            await durable_store.record_step(claimed.lease, 4, "durable.send", "[]", "null")

    async def test_events_are_published_replaced_and_fenced(self, durable_store: Store) -> None:
        claimed = await self._held(durable_store)
        assert await durable_store.get_event(claimed.id, "stage") is None
        await durable_store.set_event(claimed.lease, "stage", "1")
        await durable_store.set_event(claimed.lease, "stage", '"two"')
        await durable_store.set_event(claimed.lease, "other", "3")
        assert await durable_store.get_event(claimed.id, "stage") == '"two"'
        assert await durable_store.get_event(claimed.id, "other") == "3"
        await durable_store.cancel_workflow(claimed.id)
        with pytest.raises(LeaseLostError):
            await durable_store.set_event(claimed.lease, "stage", "4")
        assert await durable_store.get_event(claimed.id, "stage") == '"two"'

    async def test_a_settling_child_wakes_its_waiting_parent(self, durable_store: Store) -> None:
        parent, child = await self._parent_and_child(durable_store)
        wait = wait_for(WaitKind.CHILD, child.id)
        assert await durable_store.suspend(parent.lease, [wait])
        assert (await self._row(durable_store, parent.id)).waiting_for == f"child:{child.id}"
        await durable_store.settle(
            Settlement(child.lease, WorkflowStatus.SUCCEEDED, output="2", parent_id=parent.id)
        )
        assert (await self._row(durable_store, parent.id)).status is WorkflowStatus.PENDING

    async def test_a_settled_child_refuses_the_parents_suspension(
        self, durable_store: Store
    ) -> None:
        parent, child = await self._parent_and_child(durable_store)
        await durable_store.settle(
            Settlement(child.lease, WorkflowStatus.FAILED, error='"x"', parent_id=parent.id)
        )
        assert not await durable_store.suspend(parent.lease, [wait_for(WaitKind.CHILD, child.id)])
        assert (await self._row(durable_store, parent.id)).status is WorkflowStatus.RUNNING

    async def test_a_settled_child_among_several_refuses_the_parents_suspension(
        self, durable_store: Store
    ) -> None:
        parent, running = await self._parent_and_child(durable_store)
        row = dataclasses.replace(new_workflow(), parent_id=parent.id)
        await durable_store.enqueue([row])
        done = await durable_store.acquire(row.id, worker_id="child", lease_seconds=30)
        assert done is not None
        await durable_store.settle(
            Settlement(done.lease, WorkflowStatus.SUCCEEDED, output="1", parent_id=parent.id)
        )
        waits = [
            wait_for(WaitKind.CHILD, running.id, index=0),
            wait_for(WaitKind.CHILD, done.id, index=1),
        ]
        assert not await durable_store.suspend(parent.lease, waits)
        assert (await self._row(durable_store, parent.id)).status is WorkflowStatus.RUNNING
        assert await durable_store.load_steps(parent.id) == []

    async def test_a_child_settling_or_cancelled_wakes_a_parent_waiting_on_several(
        self, durable_store: Store
    ) -> None:
        for end in ("settle", "cancel"):
            parent, child = await self._parent_and_child(durable_store)
            waits = [
                wait_for(WaitKind.MESSAGE, "never", index=0),
                wait_for(WaitKind.CHILD, child.id, index=1),
                wait_for(WaitKind.SLEEP, deadline=datetime.now(UTC) + timedelta(hours=1), index=2),
            ]
            assert await durable_store.suspend(parent.lease, waits)
            assert (await self._row(durable_store, parent.id)).waiting_for == "any:3"
            if end == "settle":
                await durable_store.settle(
                    Settlement(
                        child.lease, WorkflowStatus.SUCCEEDED, output="2", parent_id=parent.id
                    )
                )
            else:
                await durable_store.cancel_workflow(child.id)
            row = await self._row(durable_store, parent.id)
            assert (row.status, row.waiting_for) == (WorkflowStatus.PENDING, None), end

    async def test_cancelling_a_parent_cancels_its_unfinished_children(
        self, durable_store: Store
    ) -> None:
        parent, running = await self._parent_and_child(durable_store)
        pending = dataclasses.replace(new_workflow(), parent_id=parent.id)
        done = dataclasses.replace(new_workflow(), parent_id=parent.id)
        await durable_store.enqueue([pending, done])
        finished = await durable_store.acquire(done.id, worker_id="w", lease_seconds=30)
        assert finished is not None
        await durable_store.settle(Settlement(finished.lease, WorkflowStatus.SUCCEEDED, output="1"))
        await durable_store.cancel_workflow(parent.id)
        statuses = [
            (await self._row(durable_store, wid)).status
            for wid in (parent.id, running.id, pending.id, done.id)
        ]
        assert statuses == [WorkflowStatus.CANCELLED] * 3 + [WorkflowStatus.SUCCEEDED]
        with pytest.raises(LeaseLostError):
            await durable_store.heartbeat(running.lease, 30)

    async def test_cancelling_a_child_wakes_its_waiting_parent(self, durable_store: Store) -> None:
        parent, child = await self._parent_and_child(durable_store)
        assert await durable_store.suspend(parent.lease, [wait_for(WaitKind.CHILD, child.id)])
        await durable_store.cancel_workflow(child.id)
        assert (await self._row(durable_store, parent.id)).status is WorkflowStatus.PENDING
