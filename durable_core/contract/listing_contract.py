"""``ListingContract``: what a store must do for browsing and monitoring (part of
``StoreContract``): pages, filters, step times, and the count of ended attempts."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import anyio
import pytest

from ..caller.client import DurableClient
from ..codec.failures import dump_error
from ..errors import StatsNotSupportedError
from ..seams.records import Settlement, WorkflowRecord, WorkflowStatus
from ..seams.store import Store, WorkflowStats
from .base import ContractBase
from .support import new_workflow, unique_name


def _ids(records: list[WorkflowRecord]) -> list[str]:
    return [r.id for r in records]


class ListingContract(ContractBase):
    """Listing a page at a time, with filters; counting for monitoring."""

    async def test_pages_follow_each_other_without_gaps(self, durable_store: Store) -> None:
        name = unique_name("pages")
        # One batch: on most databases its rows share one created_at, so ids break the tie.
        await durable_store.enqueue([new_workflow(name) for _ in range(7)])
        await anyio.sleep(0.003)
        for _ in range(3):
            await durable_store.enqueue([new_workflow(name)])
            await anyio.sleep(0.003)
        everything = await durable_store.list_workflows(name=name, limit=100)
        assert len(everything) == 10
        order = [(r.created_at, r.id) for r in everything]
        assert order == sorted(order, reverse=True)

        pages: list[list[str]] = []
        before: str | None = None
        while True:
            page = await durable_store.list_workflows(name=name, limit=3, before=before)
            if not page:
                break
            pages.append(_ids(page))
            before = page[-1].id
        assert [len(p) for p in pages] == [3, 3, 3, 1]
        assert [i for p in pages for i in p] == _ids(everything)
        assert await durable_store.list_workflows(name=name, before=new_workflow().id) == []

    async def test_list_filters_by_creation_time(self, durable_store: Store) -> None:
        name = unique_name("times")
        made = []
        for _ in range(3):
            row = new_workflow(name)
            await durable_store.enqueue([row])
            made.append(row.id)
            await anyio.sleep(0.01)
        first, second, third = [await durable_store.get_workflow(i) for i in made]
        assert first is not None and second is not None and third is not None

        async def listed(**window: object) -> list[str]:
            return _ids(await durable_store.list_workflows(name=name, **window))  # type: ignore[arg-type]

        assert await listed(created_after=second.created_at) == [third.id, second.id]
        assert await listed(created_before=second.created_at) == [first.id]
        window = {"created_after": second.created_at, "created_before": third.created_at}
        assert await listed(**window) == [second.id]
        later = third.created_at + timedelta(seconds=1)
        assert await listed(created_after=later) == []
        assert await listed(created_after=first.created_at, before=third.id) == [
            second.id,
            first.id,
        ]

    async def test_list_filters_by_parent(self, durable_store: Store) -> None:
        parent = new_workflow()
        await durable_store.enqueue([parent])
        children = [dataclasses.replace(new_workflow(), parent_id=parent.id) for _ in range(2)]
        await durable_store.enqueue(children[:1])
        await anyio.sleep(0.003)
        await durable_store.enqueue(children[1:])
        await durable_store.enqueue([new_workflow()])
        listed = await durable_store.list_workflows(parent_id=parent.id)
        assert _ids(listed) == [children[1].id, children[0].id]
        assert {r.parent_id for r in listed} == {parent.id}
        assert await durable_store.list_workflows(parent_id=children[0].id) == []

    async def test_list_filters_by_queue(self, durable_store: Store) -> None:
        queue = unique_name("queue")[-20:]
        mine = [dataclasses.replace(new_workflow(), queue=queue) for _ in range(3)]
        for row in mine[:2]:
            await durable_store.enqueue([row])
            await anyio.sleep(0.003)
        await durable_store.enqueue([new_workflow(), mine[2]])
        listed = await durable_store.list_workflows(queue=queue)
        assert _ids(listed) == [mine[2].id, mine[1].id, mine[0].id]
        assert {r.queue for r in listed} == {queue}
        assert _ids(
            await durable_store.list_workflows(queue=queue, limit=1, before=mine[2].id)
        ) == [mine[1].id]
        assert await durable_store.list_workflows(queue=queue + "-none") == []

    async def test_list_filters_by_error_type(self, durable_store: Store) -> None:
        name = unique_name("errors")
        rows = [new_workflow(name, max_attempts=1) for _ in range(4)]
        await durable_store.enqueue(rows)
        kinds = ["app_errors.Over_100%", "builtins.ValueError", "app_errors.Over_100%", None]
        for row, kind in zip(rows, kinds, strict=True):
            claimed = await durable_store.acquire(row.id, worker_id="w", lease_seconds=30)
            assert claimed is not None
            if kind is None:
                await durable_store.settle(
                    Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="1")
                )
                continue
            error = dump_error({"type": kind, "message": f"{kind} here", "traceback": None})
            await durable_store.settle(
                Settlement(claimed.lease, WorkflowStatus.FAILED, error=error)
            )

        async def listed(error_type: str, **more: object) -> list[str]:
            found = await durable_store.list_workflows(name=name, error_type=error_type, **more)  # type: ignore[arg-type]
            return _ids(found)

        over = [rows[2].id, rows[0].id]
        assert sorted(await listed("app_errors.Over_100%")) == sorted(over)
        assert await listed("builtins.ValueError") == [rows[1].id]
        # LIKE's wildcards in the name are plain characters: nothing else matches.
        assert await listed("app_errors.Over%") == []
        assert await listed("app_errors.Over_1000") == []
        assert await listed("builtins") == []
        first = (await durable_store.list_workflows(name=name, limit=1, error_type=kinds[0]))[0]
        assert await listed("app_errors.Over_100%", before=first.id) == [
            i for i in over if i != first.id
        ]
        failed = WorkflowStatus.FAILED
        assert await listed("builtins.ValueError", status=failed) == [rows[1].id]

    async def test_steps_say_when_they_began_and_ended(self, durable_store: Store) -> None:
        row = new_workflow()
        await durable_store.enqueue([row])
        claimed = await durable_store.acquire(row.id, worker_id="w", lease_seconds=30)
        assert claimed is not None
        await durable_store.start_step(claimed.lease, 0, "first", "[]")
        await anyio.sleep(0.01)
        await durable_store.complete_step(claimed.lease, 0, "1")
        await durable_store.start_step(claimed.lease, 1, "second", "[]")
        done, running = await durable_store.load_steps(row.id)
        assert done.started_at is not None and done.completed_at is not None
        assert done.completed_at - done.started_at >= timedelta(milliseconds=5)
        assert running.started_at is not None and running.completed_at is None

    async def test_counts_ended_attempts_by_queue(self, durable_store: Store) -> None:
        client = DurableClient(durable_store)
        if not isinstance(durable_store, WorkflowStats):
            assert not client.has_stats
            with pytest.raises(StatsNotSupportedError, match="does not count"):
                await client.count_ended_attempts()
            return
        assert client.has_stats
        start = await client.count_ended_attempts()
        assert start.counts == {}
        rows = [new_workflow() for _ in range(3)]
        rows.append(dataclasses.replace(new_workflow(), queue="contract-elsewhere"))
        await durable_store.enqueue(rows)
        leases = []
        for row in rows:
            claimed = await durable_store.acquire(row.id, worker_id="w", lease_seconds=30)
            assert claimed is not None
            leases.append(claimed.lease)
        await durable_store.settle(Settlement(leases[0], WorkflowStatus.SUCCEEDED, output="1"))
        await durable_store.settle(Settlement(leases[1], WorkflowStatus.SUCCEEDED, output="2"))
        await durable_store.settle(Settlement(leases[2], WorkflowStatus.FAILED, error="{}"))
        await durable_store.settle(Settlement(leases[3], WorkflowStatus.SUCCEEDED, output="3"))
        ended = await client.count_ended_attempts(start.cursor)
        assert ended.counts == {
            ("default", "succeeded"): 2,
            ("default", "failed"): 1,
            ("contract-elsewhere", "succeeded"): 1,
        }
        assert ended.cursor > start.cursor
        again = await client.count_ended_attempts(ended.cursor)
        assert again.counts == {} and again.cursor == ended.cursor
