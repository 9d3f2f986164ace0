"""``CallerContract``: the caller role (:class:`~durable_core.seams.roles.CallerStore`):
enqueue and read workflows, send messages. Its tests use no other role, so a store or a
fake that only plays this one runs it.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import anyio
import anyio.lowlevel
import pytest

from ..errors import (
    FrameworkError,
    WorkflowConflictError,
    WorkflowNotFoundError,
)
from ..seams.records import (
    WorkflowStatus,
)
from ..seams.roles import CallerStore
from .base import ContractBase, require
from .support import (
    SAFETY_SECONDS,
    new_workflow,
    unique_name,
)


class CallerContract(ContractBase):
    """Tests for a :class:`~durable_core.seams.roles.CallerStore`: ``durable_store`` may play
    no other role."""

    # -- enqueue ---------------------------------------------------------------

    async def test_enqueue_then_get_returns_the_row(self, durable_store: CallerStore) -> None:
        row = new_workflow(input='{"args":[1,"two"],"kwargs":{"x":null}}', max_attempts=7)
        await durable_store.enqueue([row])
        got = await self.record(durable_store, row.id)
        assert (got.id, got.name, got.input) == (row.id, row.name, row.input)
        assert got.status is WorkflowStatus.PENDING
        assert (got.attempts, got.max_attempts) == (0, 7)
        assert (got.output, got.error, got.completed_at) == (None, None, None)
        assert (got.locked_by, got.locked_until) == (None, None)
        for moment in (got.created_at, got.updated_at, got.run_at):
            self.assert_near_now(moment)
        assert abs(got.run_at - got.created_at) < timedelta(seconds=1)

    async def test_enqueue_nothing_is_a_no_op(self, durable_store: CallerStore) -> None:
        await durable_store.enqueue([])
        assert await durable_store.list_workflows(limit=10) == []

    async def test_enqueue_batch_of_500_in_one_call(self, durable_store: CallerStore) -> None:
        name = unique_name("batch")
        rows = [new_workflow(name, input=f'{{"args":[{i}],"kwargs":{{}}}}') for i in range(500)]
        await durable_store.enqueue(rows)
        listed = await durable_store.list_workflows(name=name, limit=1000)
        assert len(listed) == 500
        assert {r.id: r.input for r in listed} == {r.id: r.input for r in rows}
        assert all(r.status is WorkflowStatus.PENDING and r.attempts == 0 for r in listed)

    async def test_enqueue_batch_is_atomic(self, durable_store: CallerStore) -> None:
        first, second = new_workflow(), new_workflow()
        duplicate = new_workflow(id=first.id)
        with pytest.raises(FrameworkError):
            await durable_store.enqueue([first, second, duplicate])
        assert await durable_store.get_workflow(first.id) is None
        assert await durable_store.get_workflow(second.id) is None

    async def test_enqueue_existing_id_with_other_input_conflicts_and_keeps_the_row(
        self, durable_store: CallerStore
    ) -> None:
        row = new_workflow(input='{"args":["original"],"kwargs":{}}')
        await durable_store.enqueue([row])
        other = dataclasses.replace(row, input='{"args":[],"kwargs":{}}')
        fresh = new_workflow()
        with pytest.raises(WorkflowConflictError, match=row.id):
            await durable_store.enqueue([fresh, other])
        assert (await self.record(durable_store, row.id)).input == row.input
        assert await durable_store.get_workflow(fresh.id) is None, "a conflict writes nothing"
        renamed = dataclasses.replace(row, name=unique_name("other"))
        with pytest.raises(WorkflowConflictError, match="is taken by workflow"):
            await durable_store.enqueue([renamed])

    async def test_enqueue_delay_sets_run_at_with_subsecond_precision(
        self, durable_store: CallerStore
    ) -> None:
        later = await self.enqueue_one(durable_store, delay_seconds=60.0)
        soon = await self.enqueue_one(durable_store, delay_seconds=0.25)
        got_later = await self.record(durable_store, later)
        got_soon = await self.record(durable_store, soon)
        assert abs((got_later.run_at - got_later.created_at) - timedelta(seconds=60)) < timedelta(
            milliseconds=5
        )
        assert abs(
            (got_soon.run_at - got_soon.created_at) - timedelta(milliseconds=250)
        ) < timedelta(milliseconds=5)

    async def test_concurrent_batch_enqueues_all_persist(
        self, durable_store: CallerStore, durable_second_store: CallerStore
    ) -> None:
        name = unique_name("batches")
        batches = [[new_workflow(name) for _ in range(25)] for _ in range(10)]
        stores = (durable_store, durable_second_store)
        with anyio.fail_after(SAFETY_SECONDS):
            async with anyio.create_task_group() as group:
                for number, batch in enumerate(batches):
                    group.start_soon(stores[number % 2].enqueue, batch)
        listed = await durable_store.list_workflows(name=name, limit=1000)
        assert {r.id for r in listed} == {row.id for batch in batches for row in batch}

    # -- reads ----------------------------------------------------------------

    async def test_get_unknown_workflow_returns_none(self, durable_store: CallerStore) -> None:
        assert await durable_store.get_workflow(new_workflow().id) is None

    async def test_list_is_newest_first(self, durable_store: CallerStore) -> None:
        name = unique_name("order")
        ids = []
        for _ in range(5):
            ids.append(await self.enqueue_one(durable_store, name=name))
            await anyio.sleep(0.003)
        listed = await durable_store.list_workflows(name=name)
        assert [r.id for r in listed] == ids[::-1]
        assert [r.created_at for r in listed] == sorted(
            (r.created_at for r in listed), reverse=True
        )

    async def test_list_limit_keeps_the_newest(self, durable_store: CallerStore) -> None:
        name = unique_name("limit")
        ids = []
        for _ in range(5):
            ids.append(await self.enqueue_one(durable_store, name=name))
            await anyio.sleep(0.003)
        newest = await durable_store.list_workflows(name=name, limit=2)
        assert [r.id for r in newest] == [ids[4], ids[3]]
        assert len(await durable_store.list_workflows(name=name, limit=1)) == 1

    async def test_list_name_filter_is_exact(self, durable_store: CallerStore) -> None:
        name = unique_name("Case")
        exact = await self.enqueue_one(durable_store, name=name)
        await self.enqueue_one(durable_store, name=name.lower())
        await self.enqueue_one(durable_store, name=name + ".more")
        assert [r.id for r in await durable_store.list_workflows(name=name)] == [exact]

    async def test_load_steps_of_unknown_workflow_is_empty(
        self, durable_store: CallerStore
    ) -> None:
        assert await durable_store.load_steps(new_workflow().id) == []

    # -- messages and events ---------------------------------------------------

    async def test_send_to_an_unknown_workflow_raises_not_found(
        self, durable_store: CallerStore
    ) -> None:
        require(durable_store, "send")
        with pytest.raises(WorkflowNotFoundError, match="no-such-workflow"):
            await durable_store.send("no-such-workflow", "", '"x"', "m-lost")
