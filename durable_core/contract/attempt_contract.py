"""``AttemptContract``: the attempt's writes (:class:`~durable_core.seams.roles.AttemptStore`):
steps, settling, fencing by the lease, values kept exactly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from ..caller.client import DurableClient
from ..codec.failures import load_error
from ..errors import (
    InvalidArgumentsError,
    LeaseLostError,
)
from ..seams.records import (
    Lease,
    Settlement,
    StepStatus,
    StepWrite,
    WorkflowStatus,
)
from ..seams.store import Store
from . import workflows as wfs
from .base import STALE_KINDS, ContractBase
from .support import (
    ODD_TEXTS,
    big_text,
    new_workflow,
    snapshot,
)

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


class AttemptContract(ContractBase):
    """Tests for an :class:`~durable_core.seams.roles.AttemptStore` (with the caller and run
    roles to set rows up, the admin role to cancel one)."""

    # -- steps ----------------------------------------------------------------

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

    # -- settling -------------------------------------------------------------

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

    # -- fencing --------------------------------------------------------------

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

    @pytest.mark.parametrize("kind", STALE_KINDS)
    @pytest.mark.parametrize("write", _WRITES)
    async def test_a_lease_that_lost_the_workflow_cannot_write(
        self, durable_store: Store, kind: str, write: str
    ) -> None:
        stale, current = await self.stale_lease(durable_store, kind)
        before = await snapshot(durable_store, stale.workflow_id)
        with pytest.raises(LeaseLostError):
            await self._write(durable_store, stale, write)()
        assert await snapshot(durable_store, stale.workflow_id) == before
        if current is not None:
            await durable_store.heartbeat(current, 30)
            await durable_store.complete_step(current, 1, '"current"')
            steps = await durable_store.load_steps(stale.workflow_id)
            assert (steps[1].status, steps[1].output) == (StepStatus.SUCCEEDED, '"current"')

    # -- values kept exactly ---------------------------------------------------

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
