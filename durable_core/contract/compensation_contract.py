"""``CompensationContract``: what a store with the
:class:`~durable_core.seams.store.Compensations` role must do (sagas, no schema change): a
cancel of a workflow that owes compensations is a request its worker settles after
running them. A store that has the role adds the class to its contract test class::

    class TestMyStore(StoreContract, NoClaimerContract, CompensationContract):
        pass
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import ClassVar

import pytest

from ..durations import utcnow
from ..errors import LeaseLostError
from ..seams.records import ClaimedWorkflow, Wait, WaitKind, WorkflowStatus
from ..seams.store import Compensations, Store
from .support import new_workflow


def compensations(store: Store) -> Compensations:
    """``store`` as a :class:`Compensations`, or a failure naming what it lacks."""
    if not isinstance(store, Compensations):
        pytest.fail(
            f"{type(store).__name__} is not a Compensations store (owes_compensation, "
            "cancel_requested, settle_cancelled): build it on durable_core.sql.SQLStore, "
            "or leave CompensationContract out",
            pytrace=False,
        )
    return store


async def owing(store: Store) -> ClaimedWorkflow:
    """A new workflow of ``store``, leased, whose saga at path ``0`` recorded one
    compensation (at index 2, after a step at 1)."""
    row = new_workflow()
    await store.enqueue([row])
    claimed = await store.acquire(row.id, worker_id="saga", lease_seconds=30)
    assert claimed is not None
    lease = claimed.lease
    await store.record_step(lease, 0, "durable.saga", "[]", "null")
    await store.record_step(lease, 1, "book", '{"args": [], "kwargs": {}}', '"car-1"')
    registered = json.dumps({"step": "undo", "input": '{"args": ["car-1"], "kwargs": {}}'})
    await store.record_step(lease, 2, "durable.compensate", '["0"]', registered)
    return claimed


class CompensationContract:
    """Tests of the :class:`~durable_core.seams.store.Compensations` role."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    async def test_a_cancel_of_a_running_workflow_owing_compensations_is_a_request(
        self, durable_store: Store
    ) -> None:
        role = compensations(durable_store)
        claimed = await owing(durable_store)
        assert await role.owes_compensation(claimed.id)
        assert await role.cancel_requested(claimed.id) is None
        await durable_store.cancel_workflow(claimed.id)
        record = await durable_store.get_workflow(claimed.id)
        assert record is not None and record.status is WorkflowStatus.RUNNING
        await durable_store.heartbeat(claimed.lease, 30)  # its worker keeps the lease
        requested = await role.cancel_requested(claimed.id)
        assert requested is not None and json.loads(requested)["message"].endswith("cancelled")
        # The worker runs the compensation, ends the saga, then settles.
        lease = claimed.lease
        await durable_store.record_step(lease, 3, "undo", '{"args": ["car-1"]}', "null", path="0/0")
        await durable_store.record_step(
            lease, 4, "durable.saga_end", '["0"]', '["undo"]', path="0/end"
        )
        assert not await role.owes_compensation(claimed.id)
        stranger = dataclasses.replace(lease, token="not-the-lease")
        with pytest.raises(LeaseLostError):
            await role.settle_cancelled(stranger, '{"message": "compensated"}')
        assert await role.settle_cancelled(lease, '{"message": "compensated"}')
        record = await durable_store.get_workflow(claimed.id)
        assert record is not None and record.status is WorkflowStatus.CANCELLED
        assert record.error == '{"message": "compensated"}'
        assert await role.cancel_requested(claimed.id) is None, "the request is done"
        outcomes = [a.outcome for a in await durable_store.load_attempts(claimed.id)]
        assert outcomes == ["cancelled"]

    async def test_a_waiting_workflow_owing_compensations_is_woken_to_run_them(
        self, durable_store: Store
    ) -> None:
        role = compensations(durable_store)
        claimed = await owing(durable_store)
        later = utcnow() + timedelta(days=3)
        sleep = Wait(WaitKind.SLEEP, "", later, 3, "durable.sleep", "[]", step_output="null")
        assert await durable_store.suspend(claimed.lease, [sleep])
        await durable_store.cancel_workflow(claimed.id)
        record = await durable_store.get_workflow(claimed.id)
        assert record is not None and record.status is WorkflowStatus.PENDING
        again = await durable_store.acquire(claimed.id, worker_id="saga", lease_seconds=30)
        assert again is not None, "due now"
        assert await role.cancel_requested(claimed.id) is not None
        assert await role.settle_cancelled(again.lease, None)
        record = await durable_store.get_workflow(claimed.id)
        assert record is not None and record.status is WorkflowStatus.CANCELLED
        assert json.loads(record.error or "{}")["type"].endswith(".WorkflowCancelledError")

    async def test_a_workflow_whose_saga_ended_is_cancelled_at_once(
        self, durable_store: Store
    ) -> None:
        role = compensations(durable_store)
        claimed = await owing(durable_store)
        lease = claimed.lease
        await durable_store.record_step(lease, 3, "durable.saga_end", '["0"]', "null", path="0/end")
        assert not await role.owes_compensation(claimed.id)
        await durable_store.cancel_workflow(claimed.id)
        record = await durable_store.get_workflow(claimed.id)
        assert record is not None and record.status is WorkflowStatus.CANCELLED
        with pytest.raises(LeaseLostError):
            await durable_store.heartbeat(lease, 30)
        assert not await role.settle_cancelled(lease, None), "no request to settle"
