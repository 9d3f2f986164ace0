"""A worker's slots: a workflow holds one while its body runs and frees it once the body
has ended, so the next claim goes out while that workflow's settlement commits; at
most ``concurrency`` more settle at once."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from durable_core import DurableClient, WorkflowConfig, WorkflowStatus, workflow
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.records import Settlement, StepWrite
from durable_postgres import PostgresStore

from .conftest import eventually

bodies: list[int] = []


@workflow
async def quick(n: int) -> int:
    bodies.append(n)
    return n


class HeldSettlements(PostgresStore):
    """Holds every flush that settles a workflow until :attr:`release` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.release = anyio.Event()
        self.held = 0
        self.settled = 0

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        if settlements:
            self.held += 1
            await self.release.wait()
        landed = await super().write_batch(steps, settlements)
        self.settled += sum(landed[1])
        return landed


@asynccontextmanager
async def _worker_holding_settlements(
    url: str,
) -> AsyncIterator[tuple[HeldSettlements, WorkflowWorker]]:
    """A worker at concurrency 1 on a store that holds its settlements."""
    store = HeldSettlements(url)
    await store.open()
    try:
        yield store, WorkflowWorker(store, WorkflowConfig(concurrency=1, poll_interval_ms=50))
    finally:
        await store.close()


async def test_a_body_that_ended_frees_its_slot_while_its_settlement_commits(
    pg: PostgresStore, postgres_url: str
) -> None:
    bodies.clear()
    handles = await DurableClient(pg).start_workflows(quick, [(0,), (1,), (2,)])
    async with (
        _worker_holding_settlements(postgres_url) as (store, worker),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        try:
            await _settles_overlap_claims(store, worker)
        finally:
            store.release.set()

        async def all_settled() -> bool:
            return store.settled == 3

        await eventually(all_settled, timeout=60, what="every settlement")
        worker.stop()
    assert sorted(bodies) == [0, 1, 2]
    for handle in handles:
        assert (await handle.info()).status is WorkflowStatus.SUCCEEDED


async def _settles_overlap_claims(store: HeldSettlements, worker: WorkflowWorker) -> None:
    async def two_bodies_ran() -> bool:
        return len(bodies) >= 2

    # The first settlement is held, yet the second workflow was claimed and ran.
    await eventually(two_bodies_ran, timeout=60, what="a second body, beside a settle")
    assert store.held == 1 and store.settled == 0
    # Two settling is the most with concurrency 1: no third claim until one lands.
    await anyio.sleep(0.3)
    assert worker.claimed_total == 2 and len(bodies) == 2
    assert worker.in_flight == 2
    assert worker.record().in_flight == 0, "the registry shows slots: settling holds none"


async def _abandon_beside_a_gathering_settlement(url: str, outcome: dict[str, Any]) -> None:
    async with (
        _worker_holding_settlements(url) as (_, worker),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)

        async def second_settles() -> bool:
            return len(bodies) >= 2 and worker.in_flight == 2

        await eventually(second_settles, timeout=60, what="two workflows settling")
        worker.abandon()
        outcome["abandoned"] = worker.abandoned


async def test_an_abandoned_worker_fails_the_writes_still_gathering(
    pg: PostgresStore, postgres_url: str
) -> None:
    """Abandoned with one settlement in a flush and the next one gathering behind it (the
    flusher is cancelled, so no flush will carry it): run() returns, and both rows are
    left running for their leases to expire. A waiter on a batch cannot be cancelled
    before the batch ends, so before, the worker spun on its cancellation for ever (in a
    thread of its own here, so that such a hang fails the test)."""
    bodies.clear()
    handles = await DurableClient(pg).start_workflows(quick, [(0,), (1,), (2,)])
    outcome: dict[str, Any] = {}
    worker = threading.Thread(
        target=anyio.run,
        args=(_abandon_beside_a_gathering_settlement, postgres_url, outcome),
        daemon=True,
    )
    worker.start()
    await anyio.to_thread.run_sync(worker.join, 120)
    assert not worker.is_alive(), "the abandoned worker hung on a write still gathering"
    assert outcome == {"abandoned": True}
    statuses = sorted([(await handle.info()).status.value for handle in handles])
    assert statuses == ["pending", "running", "running"]  # the two claimed, in any order
