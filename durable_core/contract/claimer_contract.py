"""``ClaimerContract`` for stores that claim work, ``NoClaimerContract`` for those that do not."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, ClassVar

import anyio
import pytest

from ..caller.client import DurableClient
from ..definitions.queues import DEFAULT_QUEUE, Queue, RateLimit, Route
from ..errors import ClaimNotSupportedError, LeaseLostError
from ..runtime.config import WorkflowConfig
from ..runtime.worker import WorkflowWorker
from ..seams.records import ClaimedWorkflow, Settlement, StepStatus, WorkflowStatus
from ..seams.store import Claimer, Store
from . import workflows as wfs
from .support import SAFETY_SECONDS, new_workflow, unique_name

_FIRST_WINDOW = 0.5
"""The length (seconds) a test of a time window tries first; each run whose checks came
too late for its window is followed by one with a window four times as long."""


def _claimer(store: Store) -> Claimer:
    assert isinstance(store, Claimer), f"{store.description} does not implement Claimer"
    return store


class ClaimerContract:
    """What a store that hands out work (a :class:`~durable_core.seams.store.Claimer`) must do.

    Uses the same fixtures as :class:`~durable_core.contract.StoreContract` and, because
    a claim takes whatever is runnable, needs ``durable_store`` to start with empty tables.
    ``wakes_on_enqueue`` says whether ``wait_for_work`` returns early when work arrives
    (PostgreSQL's LISTEN/NOTIFY does); a polling claimer sets it to ``False``.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    short_lease: ClassVar[float] = 0.05
    wakes_on_enqueue: ClassVar[bool] = True

    @pytest.fixture(scope="session")
    @classmethod
    def anyio_backend(cls) -> str:
        """The stores run on asyncio."""
        return "asyncio"

    @pytest.fixture(autouse=True)
    def lane(self) -> str:
        """The workflow name this test's rows have; its claims route to it."""
        self.name = unique_name("claim")
        return self.name

    def routes(self, *queues: Queue, names: tuple[str, ...] | None = None) -> list[Route]:
        """Routes to this test's rows (in ``queues``; the default queue if none)."""
        return [
            Route(queue, names or (self.name,), 1000) for queue in queues or (Queue(DEFAULT_QUEUE),)
        ]

    async def claim(
        self,
        store: Store,
        worker_id: str,
        limit: int,
        lease_seconds: float = 30,
        *,
        routes: list[Route] | None = None,
    ) -> list[ClaimedWorkflow]:
        """Claim this test's rows, or what ``routes`` name."""
        return await _claimer(store).claim(
            worker_id=worker_id,
            limit=limit,
            lease_seconds=lease_seconds,
            routes=routes or self.routes(),
        )

    async def within_a_window(self, check: Callable[[float, str], Awaitable[bool]]) -> None:
        """Run ``check(seconds, queue)`` with a window (a lease, a rate limit's period) of
        :data:`_FIRST_WINDOW` seconds, on a queue of its own, until a run made its checks
        inside the window. ``check`` returns ``False`` when the window may have ended
        before it made them (a loaded machine can take longer than half a second between
        two claims): that run proves nothing either way, and one with a window four times
        as long follows, so no machine is too slow for the test."""
        seconds = _FIRST_WINDOW
        for number in itertools.count():
            if await check(seconds, f"window{number}"):
                return
            seconds *= 4

    async def claim_and_settle(self, store: Store, routes: list[Route]) -> list[ClaimedWorkflow]:
        """Claim what ``routes`` allow and settle each claimed workflow as succeeded."""
        claimed = await self.claim(store, "w", 10, routes=routes)
        for item in claimed:
            await store.settle(Settlement(item.lease, WorkflowStatus.SUCCEEDED, output="1"))
        return claimed

    async def paced_again(
        self, store: Store, routes: list[Route], began: float, seconds: float, expected: int
    ) -> bool:
        """A rate limit's window of ``seconds``, begun at ``began``, allows no start until it
        ends and ``expected`` starts after; ``False`` when the refused claim came too late
        to prove the first (see :meth:`within_a_window`)."""
        again = await self.claim(store, "w", 10, routes=routes)
        if time.monotonic() - began >= seconds:
            return False
        assert again == []
        await anyio.sleep(seconds + 0.1)
        assert len(await self.claim(store, "w", 10, routes=routes)) == expected
        return True

    async def enqueue(
        self, store: Store, count: int, *, row: Mapping[str, Any] | None = None, **options: Any
    ) -> list[str]:
        """Enqueue ``count`` rows of this test's name (``row`` sets their other fields)."""
        rows = [
            dataclasses.replace(new_workflow(self.name, **options), **(row or {}))
            for _ in range(count)
        ]
        await store.enqueue(rows)
        return [row.id for row in rows]

    async def test_claim_leases_due_workflows(self, durable_store: Store) -> None:
        due = await self.enqueue(durable_store, 3, max_attempts=5)
        await self.enqueue(durable_store, 1, delay_seconds=60)
        claimed = await self.claim(durable_store, "w1", 10, 30)
        assert sorted(c.id for c in claimed) == sorted(due)
        assert len({c.lease.token for c in claimed}) == 3
        for item in claimed:
            assert (item.attempts, item.max_attempts, item.lease.worker_id) == (1, 5, "w1")
            record = await durable_store.get_workflow(item.id)
            assert record is not None
            assert (record.status, record.locked_by) == (WorkflowStatus.RUNNING, "w1")

    async def test_claim_respects_the_limit(self, durable_store: Store) -> None:
        ids = await self.enqueue(durable_store, 5)
        first = await self.claim(durable_store, "w", 2, 30)
        rest = await self.claim(durable_store, "w", 10, 30)
        assert (len(first), len(rest)) == (2, 3)
        assert sorted(c.id for c in first + rest) == sorted(ids)
        assert await self.claim(durable_store, "w", 10, 30) == []

    async def test_a_claim_takes_only_the_names_and_queues_it_routes(
        self, durable_store: Store
    ) -> None:
        mine = await self.enqueue(durable_store, 2)
        elsewhere = await self.enqueue(durable_store, 1, row={"queue": "reports"})
        stranger = new_workflow(unique_name("nobody-serves"))
        await durable_store.enqueue([stranger])
        assert sorted(c.id for c in await self.claim(durable_store, "w", 10)) == sorted(mine)
        assert await self.claim(durable_store, "w", 10) == []
        [report] = await self.claim(durable_store, "w", 10, routes=self.routes(Queue("reports")))
        assert (report.id, report.queue) == (elsewhere[0], "reports")
        record = await durable_store.get_workflow(stranger.id)
        assert record is not None
        assert (record.status, record.attempts) == (WorkflowStatus.PENDING, 0)

    async def test_a_higher_priority_is_claimed_first(self, durable_store: Store) -> None:
        low = await self.enqueue(durable_store, 2)
        high = await self.enqueue(durable_store, 2, row={"priority": 5})
        first = await self.claim(durable_store, "w", 2)
        assert sorted(c.id for c in first) == sorted(high)
        assert sorted(c.id for c in await self.claim(durable_store, "w", 2)) == sorted(low)

    async def test_a_route_takes_at_most_its_share(self, durable_store: Store) -> None:
        await self.enqueue(durable_store, 5)
        routes = [Route(Queue(DEFAULT_QUEUE), (self.name,), 2)]
        assert len(await self.claim(durable_store, "w", 10, routes=routes)) == 2

    async def test_a_queue_concurrency_limit_holds_across_claimers(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        await self.enqueue(durable_store, 6, row={"queue": "limited"})
        limited = self.routes(Queue("limited", concurrency=2))
        first = await self.claim(durable_store, "w1", 10, routes=limited)
        second = await self.claim(durable_second_store, "w2", 10, routes=limited)
        assert (len(first), len(second)) == (2, 0)
        await durable_store.settle(Settlement(first[0].lease, WorkflowStatus.SUCCEEDED, output="1"))
        assert len(await self.claim(durable_second_store, "w2", 10, routes=limited)) == 1

    async def test_an_expired_lease_frees_its_slot(self, durable_store: Store) -> None:
        async def check(seconds: float, queue: str) -> bool:
            await self.enqueue(durable_store, 3, row={"queue": queue})
            limited = self.routes(Queue(queue, concurrency=1))
            began = time.monotonic()
            [crashed] = await self.claim(durable_store, "w1", 10, seconds, routes=limited)
            held = await self.claim(durable_store, "w2", 10, routes=limited)
            if time.monotonic() - began >= seconds:
                return False
            assert held == []
            await anyio.sleep(seconds + 0.1)
            [taken] = await self.claim(durable_store, "w2", 10, routes=limited)
            assert taken.id == crashed.id and taken.crashed is not None
            return True

        await self.within_a_window(check)

    async def test_a_rate_limit_counts_starts_in_its_window(self, durable_store: Store) -> None:
        async def check(seconds: float, queue: str) -> bool:
            await self.enqueue(durable_store, 5, row={"queue": queue})
            paced = self.routes(Queue(queue, rate_limit=RateLimit(2, period=seconds)))
            began = time.monotonic()
            first = await self.claim_and_settle(durable_store, paced)
            assert len(first) == 2
            return await self.paced_again(durable_store, paced, began, seconds, 2)

        await self.within_a_window(check)

    async def test_a_concurrency_key_limits_each_key(self, durable_store: Store) -> None:
        for key in ("alice", "bob"):
            await self.enqueue(durable_store, 3, row={"queue": "keyed", "concurrency_key": key})
        unkeyed = await self.enqueue(durable_store, 2, row={"queue": "keyed"})
        keyed = self.routes(Queue("keyed", key_concurrency=1))
        claimed = await self.claim(durable_store, "w", 10, routes=keyed)
        records = [await durable_store.get_workflow(c.id) for c in claimed]
        keys = sorted(str(r.concurrency_key) for r in records if r is not None)
        assert keys == ["None", "None", "alice", "bob"]
        assert set(unkeyed) <= {c.id for c in claimed}
        assert await self.claim(durable_store, "w", 10, routes=keyed) == []

    async def test_a_hot_key_does_not_hold_back_a_cold_one(self, durable_store: Store) -> None:
        hot = await self.enqueue(durable_store, 30, row={"queue": "fair", "concurrency_key": "h"})
        [cold] = await self.enqueue(durable_store, 1, row={"queue": "fair", "concurrency_key": "c"})
        fair = self.routes(Queue("fair", key_concurrency=5))
        # The oldest row first (a hot one: same run_at, one batch); then the cold key's,
        # whose key runs nothing, before the hot key's second: the least busy key first,
        # however long the hot key's backlog.
        [first] = await self.claim(durable_store, "w", 1, routes=fair)
        [second] = await self.claim(durable_store, "w", 1, routes=fair)
        assert (first.id in hot, second.id) == (True, cold)
        more = await self.claim(durable_store, "w", 10, routes=fair)
        assert len(more) == 4, "the hot key up to its limit"

    async def test_claims_go_round_the_keys(self, durable_store: Store) -> None:
        keys = [f"k{n:02d}" for n in range(6)]
        for key in keys:
            await self.enqueue(durable_store, 3, row={"queue": "round", "concurrency_key": key})
        rounds = self.routes(Queue("round", key_concurrency=3))
        served = []
        for _ in keys:
            [one] = await self.claim(durable_store, "w", 1, routes=rounds)
            record = await durable_store.get_workflow(one.id)
            assert record is not None
            served.append(str(record.concurrency_key))
        assert sorted(served) == keys, "each key once before any key twice"

    async def test_a_key_rate_limit_counts_each_keys_starts(self, durable_store: Store) -> None:
        async def check(seconds: float, queue: str) -> bool:
            for key in ("alice", "bob"):
                await self.enqueue(durable_store, 4, row={"queue": queue, "concurrency_key": key})
            paced = self.routes(Queue(queue, key_rate_limit=RateLimit(2, period=seconds)))
            began = time.monotonic()
            first = await self.claim_and_settle(durable_store, paced)
            records = [await durable_store.get_workflow(c.id) for c in first]
            keys = sorted(str(r.concurrency_key) for r in records if r is not None)
            assert keys == ["alice"] * 2 + ["bob"] * 2
            return await self.paced_again(durable_store, paced, began, seconds, 4)

        await self.within_a_window(check)

    async def test_claim_skips_held_and_finished_workflows(self, durable_store: Store) -> None:
        held, done, cancelled, free = await self.enqueue(durable_store, 4)
        assert await durable_store.acquire(held, worker_id="other", lease_seconds=30) is not None
        finished = await durable_store.acquire(done, worker_id="other", lease_seconds=30)
        assert finished is not None
        await durable_store.settle(Settlement(finished.lease, WorkflowStatus.SUCCEEDED, output="1"))
        await durable_store.cancel_workflow(cancelled)
        claimed = await self.claim(durable_store, "w", 10, 30)
        assert [c.id for c in claimed] == [free]

    async def test_claim_reclaims_expired_leases(self, durable_store: Store) -> None:
        ids = await self.enqueue(durable_store, 2)
        first = await self.claim(durable_store, "w1", 10, self.short_lease)
        await durable_store.start_step(first[0].lease, 0, "s", '"in"')
        await durable_store.complete_step(first[0].lease, 0, '"cached"')
        await anyio.sleep(self.short_lease * 2 + 0.05)
        second = await self.claim(durable_store, "w2", 10, 30)
        assert sorted(c.id for c in second) == sorted(ids)
        assert all(c.attempts == 2 and c.lease.worker_id == "w2" for c in second)
        assert not {c.lease.token for c in first} & {c.lease.token for c in second}
        with pytest.raises(LeaseLostError):
            await durable_store.heartbeat(first[0].lease, 30)
        again = next(c for c in second if c.id == first[0].id)
        if again.steps is not None:
            assert again.steps == tuple(await durable_store.load_steps(again.id))
            assert again.steps[0].status is StepStatus.SUCCEEDED

    async def test_concurrent_claims_never_hand_out_a_workflow_twice(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        ids = await self.enqueue(durable_store, 30)
        claimers = (_claimer(durable_store), _claimer(durable_second_store))
        got: list[ClaimedWorkflow] = []

        async def worker(number: int) -> None:
            while True:
                batch = await claimers[number % 2].claim(
                    worker_id=f"w{number}", limit=4, lease_seconds=30, routes=self.routes()
                )
                if not batch:
                    return
                got.extend(batch)

        with anyio.fail_after(SAFETY_SECONDS):
            async with anyio.create_task_group() as group:
                for number in range(4):
                    group.start_soon(worker, number)
        assert sorted(c.id for c in got) == sorted(ids)

    async def test_wait_for_work_returns_by_its_timeout(self, durable_store: Store) -> None:
        # No work arrives: the wait ends by itself (the safety limit only stops a hang).
        with anyio.fail_after(SAFETY_SECONDS):
            await _claimer(durable_store).wait_for_work(0.2)

    async def test_wait_for_work_wakes_when_work_arrives(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        claimer = _claimer(durable_store)
        # A worker claims before it waits: the wait returns on work since that claim.
        assert (
            await claimer.claim(worker_id="w", limit=1, lease_seconds=30, routes=self.routes())
            == []
        )
        # A store that wakes on enqueue waits an hour: only the enqueue can end the wait.
        timeout = 3600.0 if self.wakes_on_enqueue else 0.3
        enqueued = False

        async def wait() -> None:
            await claimer.wait_for_work(timeout)
            assert enqueued or not self.wakes_on_enqueue, "wait_for_work returned before work"

        with anyio.fail_after(SAFETY_SECONDS):
            async with anyio.create_task_group() as group:
                group.start_soon(wait)
                await anyio.sleep(0.1)  # the waiter starts waiting
                enqueued = True
                await self.enqueue(durable_second_store, 1)

    @pytest.fixture
    def key(self) -> Iterator[str]:
        value = unique_name("key")
        yield value
        wfs.forget(value)

    async def test_a_worker_runs_a_workflow_that_retries(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.FAILURES[key] = 1
        config = WorkflowConfig(poll_interval_ms=20, retry_backoff_secs=0, concurrency=2)
        worker = WorkflowWorker(durable_store, config, worker_id="contract-worker")
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            status = await handle.wait_with_timeout(SAFETY_SECONDS)
            worker.stop()
        assert status is WorkflowStatus.SUCCEEDED
        assert wfs.CALLS[key] == ["one", "two", "two", "three"]
        assert worker.in_flight == 0


class NoClaimerContract:
    """What a store that cannot claim must do: refuse clearly, at the first claim."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture(scope="session")
    @classmethod
    def anyio_backend(cls) -> str:
        """The stores run on asyncio."""
        return "asyncio"

    async def test_claim_raises_claim_not_supported(self, durable_store: Store) -> None:
        if isinstance(durable_store, Claimer):
            with pytest.raises(ClaimNotSupportedError, match="PostgreSQL"):
                await durable_store.claim(worker_id="w", limit=1, lease_seconds=30, routes=[])
            with pytest.raises(ClaimNotSupportedError):
                await durable_store.wait_for_work(0.01)
        else:
            assert not hasattr(durable_store, "claim")

    async def test_the_worker_stops_at_its_first_claim(self, durable_store: Store) -> None:
        row = new_workflow()
        await durable_store.enqueue([row])
        worker = WorkflowWorker(durable_store, WorkflowConfig(poll_interval_ms=10))
        with (
            anyio.fail_after(SAFETY_SECONDS),
            pytest.raises(ClaimNotSupportedError, match="PostgreSQL"),
        ):
            await worker.run()
        record = await durable_store.get_workflow(row.id)
        assert record is not None
        assert (record.status, record.attempts) == (WorkflowStatus.PENDING, 0)
