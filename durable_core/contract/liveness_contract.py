"""``LivenessContract``: for claimers that tie a worker's liveness to a database session."""

from __future__ import annotations

from typing import ClassVar

import anyio
import pytest
from anyio.abc import TaskStatus

from ..definitions.queues import DEFAULT_QUEUE, Queue, Route
from ..durations import utcnow
from ..errors import LeaseLostError
from ..seams.operators import WorkerRecord
from ..seams.records import ClaimedWorkflow
from ..seams.store import Claimer, Store, WorkerLiveness, WorkerRegistry
from .support import SAFETY_SECONDS, new_workflow, unique_name

LONG_LEASE = 300.0
"""Longer than any test lasts: a lease that ends in a test was ended, not run out."""


class _Worker:
    """A worker's liveness session, held in a task until :meth:`die`."""

    def __init__(self, store: WorkerLiveness, worker_id: str) -> None:
        self.store, self.worker_id = store, worker_id
        self._scope = anyio.CancelScope()

    async def hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with self._scope:
            await self.store.hold_liveness(self.worker_id, task_status=task_status)

    def die(self) -> None:
        """End its session, as a killed worker's ends."""
        self._scope.cancel()


class LivenessContract:
    """What a claimer that ties each worker's liveness to a database session of its own
    (a :class:`~durable_core.seams.store.WorkerLiveness`) must do, besides
    :class:`~durable_core.contract.ClaimerContract`'s: a worker whose session ended is
    found dead once, its leases are ended, and the next claim takes its workflows over
    with one more attempt while its writes are refused; a live worker's leases stand.
    Needs ``durable_store`` to start with empty tables."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture(scope="session")
    @classmethod
    def anyio_backend(cls) -> str:
        """The stores run on asyncio."""
        return "asyncio"

    async def test_a_dead_workers_workflows_are_taken_over_and_a_live_ones_stay(
        self, durable_store: Store
    ) -> None:
        store = durable_store
        assert isinstance(store, WorkerLiveness) and store.offers_liveness
        assert isinstance(store, Claimer) and isinstance(store, WorkerRegistry)
        name = unique_name("liveness")
        routes = [Route(Queue(DEFAULT_QUEUE), (name,), 1)]
        await store.enqueue([new_workflow(name), new_workflow(name)])

        async def register(worker: _Worker) -> ClaimedWorkflow:
            now = utcnow()
            queues, names = (DEFAULT_QUEUE,), (name,)
            record = WorkerRecord(worker.worker_id, "h", 1, 1, queues, names, 1, now, now, now)
            await store.beat_worker(record, LONG_LEASE)
            [claimed] = await store.claim(
                worker_id=worker.worker_id, limit=1, lease_seconds=LONG_LEASE, routes=routes
            )
            return claimed

        live, dead = _Worker(store, "contract-live"), _Worker(store, "contract-dead")
        async with anyio.create_task_group() as group:
            await group.start(live.hold)
            await group.start(dead.hold)
            kept, lost = await register(live), await register(dead)
            assert await store.end_dead_leases() == {}, "live sessions: nobody is dead"
            dead.die()
            with anyio.fail_after(SAFETY_SECONDS):
                while True:  # the session ends on the server just after its close
                    found = await store.end_dead_leases()
                    if found:
                        break
                    await anyio.sleep(0.05)
            assert found == {"contract-dead": 1}
            assert await store.end_dead_leases() == {}, "a dead worker is found once"

            [taken] = await store.claim(
                worker_id="contract-rescuer", limit=10, lease_seconds=30, routes=routes
            )
            assert taken.id == lost.id and taken.attempts == lost.attempts + 1
            assert taken.crashed is not None and taken.crashed.worker_id == "contract-dead"
            with pytest.raises(LeaseLostError):
                await store.start_step(lost.lease, 0, "s", '"late"')
            await store.heartbeat(kept.lease, LONG_LEASE)  # the live worker's lease stands
            gone = await store.list_workers(gone_within_seconds=60)
            shown = {worker.worker_id: worker.live for worker in gone}
            assert shown["contract-dead"] is False and shown["contract-live"] is True
            live.die()
