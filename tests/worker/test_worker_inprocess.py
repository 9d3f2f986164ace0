"""The worker run in the test's own process, where its store calls can be counted."""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio
import asyncpg

from durable_core import DurableClient, WorkflowConfig, WorkflowStatus, workflow, workflow_step
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.records import Lease, Settlement, StepWrite
from durable_postgres import PostgresStore

finished: list[str] = []


class CountingStore(PostgresStore):
    """The real PostgreSQL store, noting when it renews leases and settles."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.heartbeats: list[float] = []
        self.settled_at: float | None = None

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        self.heartbeats.append(time.monotonic())
        await super().heartbeat(lease, lease_seconds)
        if len(self.heartbeats) >= 3 and RENEWED:
            RENEWED[0].set()

    async def settle(self, settlement: Settlement) -> None:
        await super().settle(settlement)
        self.settled_at = time.monotonic()

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        # A worker's group commit settles here, with other writes.
        landed = await super().write_batch(steps, settlements)
        if any(landed[1]):
            self.settled_at = time.monotonic()
        return landed


@workflow_step
async def nap(seconds: float, tag: str) -> str:
    await anyio.sleep(seconds)
    finished.append(tag)
    return tag


@workflow
async def napping(seconds: float, tag: str) -> str:
    return await nap(seconds, tag)


RENEWED: list[anyio.Event] = []
"""Set once the :class:`CountingStore` has renewed a lease three times."""


@workflow_step
async def until_renewed(tag: str) -> str:
    await RENEWED[0].wait()
    finished.append(tag)
    return tag


@workflow
async def renewed_thrice(tag: str) -> str:
    return await until_renewed(tag)


async def run_worker_until(
    store: PostgresStore, config: WorkflowConfig, done: anyio.Event
) -> WorkflowWorker:
    worker = WorkflowWorker(store, config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await done.wait()
        worker.stop()
    return worker


async def test_heartbeat_renews_during_the_body_and_never_after_it_settles(
    pg: PostgresStore, postgres_url: str
) -> None:
    store = CountingStore(postgres_url)
    await store.open()
    try:
        RENEWED[:] = [anyio.Event()]  # the step runs until its lease was renewed three times
        handle = await DurableClient(store).start_workflow(renewed_thrice, "renewed")
        config = WorkflowConfig(lock_timeout_secs=1, poll_interval_ms=50, concurrency=1)
        done = anyio.Event()

        async def watch() -> None:
            await handle.wait_with_timeout(120)
            await anyio.sleep(1.6)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await run_worker_until(store, config, done)
        assert await handle.status() is WorkflowStatus.SUCCEEDED
        assert (await handle.info()).attempts == 1
        assert store.settled_at is not None
        before = [t for t in store.heartbeats if t <= store.settled_at]
        after = [t for t in store.heartbeats if t > store.settled_at]
        assert len(before) >= 3, f"renewed every 0.5 s during the step: {len(before)}"
        assert after == [], "no renewal after the workflow settled"
    finally:
        await store.close()


async def test_a_worker_that_loses_its_lease_stops_the_body(
    pg: PostgresStore, postgres_url: str, sql: asyncpg.Connection
) -> None:
    finished.clear()
    # An hour's nap: the test ends only if the worker stops the body when its lease is lost
    # (stop() waits for the bodies in flight).
    handle = await DurableClient(pg).start_workflow(napping, 3600.0, "stolen")
    config = WorkflowConfig(lock_timeout_secs=1, poll_interval_ms=50, concurrency=1)
    done = anyio.Event()

    async def steal() -> None:
        while not await sql.fetchval("SELECT count(*) FROM workflow_steps"):  # noqa: ASYNC110
            await anyio.sleep(0.02)
        await sql.execute(
            "UPDATE workflows SET lock_token = 'another-owner', "
            "locked_until = now() + interval '1 hour'"
        )
        stolen_at = time.monotonic()
        while await sql.fetchval("SELECT status FROM workflow_steps") == "running":
            if time.monotonic() - stolen_at > 1.5:
                break
            await anyio.sleep(0.05)
        done.set()

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(steal)
            worker = await run_worker_until(pg, config, done)
    assert worker.in_flight == 0
    assert finished == [], "the step body was stopped before it finished"
    row = await sql.fetchrow("SELECT status, lock_token, output FROM workflows")
    assert (row["status"], row["lock_token"], row["output"]) == ("running", "another-owner", None)
    step = await sql.fetchrow("SELECT status, output FROM workflow_steps")
    assert (step["status"], step["output"]) == ("running", None)
    assert await handle.status() is WorkflowStatus.RUNNING
