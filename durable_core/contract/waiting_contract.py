"""``WaitingContract``: what a store must do for workflows that wait (part of ``StoreContract``).

Suspending, waking, messages, events and children, first as store operations,
then through the real executor with the runner's clock.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from ..caller.client import DurableClient
from ..codec.failures import load_error
from ..errors import FrameworkError, InvalidStateError, LeaseLostError, WorkflowNotFoundError
from ..runtime.config import WorkflowConfig
from ..seams.records import (
    ClaimedWorkflow,
    Settlement,
    StepStatus,
    Wait,
    WaitKind,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.store import Store
from ..testing import WorkflowRunner
from . import workflows as wfs
from .support import SAFETY_SECONDS, new_workflow

OPERATIONS = (
    "record_step",
    "suspend",
    "receive",
    "send",
    "set_event",
    "get_event",
    "record_attempt",
    "load_attempts",
)
"""The store operations durable waits need (schema version 3)."""


def require(store: Store, *operations: str) -> None:
    """Fail, naming what is missing, when ``store`` lacks an operation waiting needs."""
    missing = [name for name in operations if not callable(getattr(store, name, None))]
    if missing:
        pytest.fail(
            f"{type(store).__name__} lacks {', '.join(f'{name}()' for name in missing)}: "
            "the Store protocol needs them for workflows that wait (durable sleep, messages, "
            "events, child workflows). Implement them, or build the store on "
            "durable_core.sql.SQLStore, which has them.",
            pytrace=False,
        )


def _wait(
    kind: WaitKind,
    key: str = "",
    deadline: datetime | None = None,
    *,
    index: int = 0,
    output: str = "null",
    path: str | None = None,
) -> Wait:
    name = f"durable.{kind.value}"
    return Wait(kind, key, deadline, index, name, json.dumps([key]), output, path)


class WaitingContract:
    """Tests for the waiting operations; :class:`~durable_core.contract.StoreContract`
    includes them."""

    async def _held(self, store: Store, **options: Any) -> ClaimedWorkflow:
        require(store, *OPERATIONS)
        row = new_workflow(**options)
        await store.enqueue([row])
        claimed = await store.acquire(row.id, worker_id="waiter", lease_seconds=30)
        assert claimed is not None
        return claimed

    async def _row(self, store: Store, workflow_id: str) -> WorkflowRecord:
        found = await store.get_workflow(workflow_id)
        assert found is not None, f"workflow {workflow_id} vanished"
        return found

    async def _acquired_once_due(self, store: Store, workflow_id: str) -> ClaimedWorkflow:
        """Acquire a waiting workflow as soon as it is due, and never before its ``wake_at``:
        when an acquire hands it out, ``wake_at`` had passed by the time it answered."""
        wake_at = (await self._row(store, workflow_id)).wake_at
        assert wake_at is not None
        with anyio.fail_after(SAFETY_SECONDS):
            while True:  # the store's clock decides when: nothing to wait on but time
                got = await store.acquire(workflow_id, worker_id="w", lease_seconds=30)
                if got is not None:
                    break
                await anyio.sleep(0.05)
        answered = datetime.now(UTC)
        assert answered >= wake_at, f"handed out at {answered}, due at {wake_at}"
        return got

    # -- suspending and waking -------------------------------------------------

    async def test_suspend_releases_the_lease_and_does_not_count_an_attempt(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        deadline = datetime.now(UTC) + timedelta(hours=1)
        wait = _wait(WaitKind.SLEEP, deadline=deadline, output='"deadline"')
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
        wait = _wait(WaitKind.SLEEP, deadline=deadline)
        assert await durable_store.suspend(claimed.lease, [wait])
        row = await self._row(durable_store, claimed.id)
        assert row.wake_at is not None and abs(row.wake_at - deadline) < timedelta(seconds=1)
        await self._acquired_once_due(durable_store, claimed.id)

    async def test_a_message_wait_with_no_deadline_waits_forever(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        assert await durable_store.suspend(claimed.lease, [_wait(WaitKind.MESSAGE, "t")])
        row = await self._row(durable_store, claimed.id)
        assert (row.waiting_for, row.wake_at) == ("message:t", None)
        assert await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30) is None

    async def test_a_stale_lease_cannot_suspend(self, durable_store: Store) -> None:
        claimed = await self._held(durable_store)
        await durable_store.cancel_workflow(claimed.id)
        with pytest.raises(LeaseLostError):
            await durable_store.suspend(claimed.lease, [_wait(WaitKind.SLEEP)])
        row = await self._row(durable_store, claimed.id)
        assert row.status is WorkflowStatus.CANCELLED
        assert await durable_store.load_steps(claimed.id) == []

    async def test_a_message_already_there_refuses_the_suspension(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        await durable_store.send(claimed.id, "t", '"early"', "m-early")
        assert not await durable_store.suspend(claimed.lease, [_wait(WaitKind.MESSAGE, "t")])
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
        assert await durable_store.suspend(claimed.lease, [_wait(WaitKind.MESSAGE, "t")])
        await durable_store.send(claimed.id, "other", '"no"', "m-other")
        assert (await self._row(durable_store, claimed.id)).status is WorkflowStatus.WAITING
        await durable_store.send(claimed.id, "t", '"yes"', "m-yes")
        row = await self._row(durable_store, claimed.id)
        assert (row.status, row.waiting_for) == (WorkflowStatus.PENDING, None)
        again = await durable_store.acquire(claimed.id, worker_id="w", lease_seconds=30)
        assert again is not None and again.attempts == 1

    # -- several waits at once ----------------------------------------------------

    async def test_several_waits_suspend_until_the_soonest_deadline(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        soon = datetime.now(UTC) + timedelta(hours=1)
        waits = [
            _wait(WaitKind.MESSAGE, "a", soon + timedelta(hours=1), index=0, path="1.0"),
            _wait(WaitKind.MESSAGE, "b", index=1, path="1.1"),
            _wait(WaitKind.SLEEP, deadline=soon, index=2, output='"soon"', path="1.2"),
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
            _wait(WaitKind.SLEEP, deadline=datetime.now(UTC) + timedelta(hours=1), index=0),
            _wait(WaitKind.MESSAGE, "a", index=1),
            _wait(WaitKind.MESSAGE, "b", index=2),
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
        waits = [_wait(WaitKind.SLEEP, index=0), _wait(WaitKind.MESSAGE, "t", index=1)]
        with pytest.raises(LeaseLostError):
            await durable_store.suspend(claimed.lease, waits)
        assert await durable_store.load_steps(claimed.id) == []

    async def test_a_message_on_one_topic_wakes_a_workflow_waiting_on_several(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        waits = [_wait(WaitKind.MESSAGE, "a", index=0), _wait(WaitKind.MESSAGE, "b", index=1)]
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
            _wait(WaitKind.SLEEP, deadline=soon + timedelta(hours=1), index=0),
            _wait(WaitKind.SLEEP, deadline=soon, index=1),
        ]
        assert await durable_store.suspend(claimed.lease, waits)
        row = await self._row(durable_store, claimed.id)
        assert row.waiting_for == "any:2"
        assert row.wake_at is not None and abs(row.wake_at - soon) < timedelta(seconds=1)
        again = await self._acquired_once_due(durable_store, claimed.id)
        assert again.attempts == 1

    async def test_send_to_an_unknown_workflow_raises_not_found(self, durable_store: Store) -> None:
        require(durable_store, "send")
        with pytest.raises(WorkflowNotFoundError, match="no-such-workflow"):
            await durable_store.send("no-such-workflow", "", '"x"', "m-lost")

    # -- messages --------------------------------------------------------------

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

    # -- events ------------------------------------------------------------------

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

    # -- children ----------------------------------------------------------------

    async def _parent_and_child(self, store: Store) -> tuple[ClaimedWorkflow, ClaimedWorkflow]:
        parent = await self._held(store)
        row = dataclasses.replace(new_workflow(), parent_id=parent.id)
        assert list(await store.enqueue([row])) == [row.id]
        assert (await self._row(store, row.id)).parent_id == parent.id
        child = await store.acquire(row.id, worker_id="child", lease_seconds=30)
        assert child is not None and child.parent_id == parent.id
        return parent, child

    async def test_a_settling_child_wakes_its_waiting_parent(self, durable_store: Store) -> None:
        parent, child = await self._parent_and_child(durable_store)
        wait = _wait(WaitKind.CHILD, child.id)
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
        assert not await durable_store.suspend(parent.lease, [_wait(WaitKind.CHILD, child.id)])
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
            _wait(WaitKind.CHILD, running.id, index=0),
            _wait(WaitKind.CHILD, done.id, index=1),
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
                _wait(WaitKind.MESSAGE, "never", index=0),
                _wait(WaitKind.CHILD, child.id, index=1),
                _wait(WaitKind.SLEEP, deadline=datetime.now(UTC) + timedelta(hours=1), index=2),
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
        assert await durable_store.suspend(parent.lease, [_wait(WaitKind.CHILD, child.id)])
        await durable_store.cancel_workflow(child.id)
        assert (await self._row(durable_store, parent.id)).status is WorkflowStatus.PENDING

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

    # -- through the executor, on the runner's clock ----------------------------

    def _runner(self, store: Store) -> WorkflowRunner:
        require(store, *OPERATIONS)
        return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0), worker_id="contract")

    async def test_a_three_day_sleep_completes_at_once_on_the_runners_clock(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        handle = await DurableClient(durable_store).start_workflow(
            wfs.sleeper, key, timedelta(days=3).total_seconds()
        )
        assert await runner.run_once(handle) is WorkflowStatus.WAITING
        row = await self._row(durable_store, handle.id)
        assert row.wake_at is not None and row.wake_at - row.created_at > timedelta(days=2.9)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        # The runner's clock passed the wake time; the wall clock is three days short of it.
        assert runner.clock.now() >= row.wake_at > datetime.now(UTC) + timedelta(days=2.9)
        assert await handle.output() == f"{key}:1:2"
        assert wfs.CALLS[key] == ["one", "two"], "the step before the sleep ran once"
        assert (await self._row(durable_store, handle.id)).attempts == 1

    async def test_a_message_sent_before_recv_is_received_and_a_timeout_gives_none(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        client = DurableClient(durable_store)
        early = await client.start_workflow(wfs.receiver, key, "t", None)
        await client.send(early.id, {"n": 1}, topic="t")
        assert await runner.run_until_complete(early) is WorkflowStatus.SUCCEEDED
        assert await early.output() == {"n": 1}
        late = await client.start_workflow(wfs.receiver, key, "t", 60.0)
        assert await runner.run_once(late) is WorkflowStatus.WAITING
        runner.clock.advance(59)
        await runner.drain()
        assert await late.status() is WorkflowStatus.WAITING
        runner.clock.advance(2)
        await runner.drain()
        assert (await late.status(), await late.output()) == (WorkflowStatus.SUCCEEDED, None)

    async def test_a_workflow_waiting_on_a_message_nobody_sent_is_reported(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        handle = await DurableClient(durable_store).start_workflow(wfs.receiver, key, "t", None)
        with pytest.raises(InvalidStateError, match="waits for message:t"):
            await runner.run_until_complete(handle)

    async def test_events_and_messages_between_runs(self, durable_store: Store, key: str) -> None:
        runner = self._runner(durable_store)
        client = DurableClient(durable_store)
        handle = await client.start_workflow(wfs.publisher, key)
        assert await handle.get_event("stage", timeout=0) is None
        assert await runner.run_once(handle) is WorkflowStatus.WAITING
        assert await handle.get_event("stage") == 1
        await client.send(handle.id, "go", topic="go")
        assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED
        assert await handle.get_event("stage") == 2
        assert await handle.output() == "go"

    async def test_children_started_in_a_body_run_once_and_fan_in(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        handle = await DurableClient(durable_store).start_workflow(wfs.fan_out, key, 5)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        assert await handle.output() == 2 * sum(range(5))
        assert wfs.CALLS[key] == ["echo"] * 5, "each child ran its step once"
        children = [
            r
            for r in await durable_store.list_workflows(name=wfs.doubled.name, limit=1000)
            if r.parent_id == handle.id
        ]
        assert len(children) == 5
        assert (await self._row(durable_store, handle.id)).attempts == 1
