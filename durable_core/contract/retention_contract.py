"""``RetentionContract``: what a store with the :class:`~durable_core.seams.retention.Pruning`
capability must do (``durable prune``, retention policies). A store that has it adds the
class to its contract test class::

    class TestMyStore(StoreContract, NoClaimerContract, RetentionContract):
        pass
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import ClassVar

import pytest

from ..durations import utcnow
from ..seams.records import NewWorkflow, Settlement, WorkflowStatus
from ..seams.retention import PruneFilter, Pruning
from ..seams.store import Store
from .support import new_workflow, unique_name

SOON = timedelta(minutes=5)
"""A filter's ``before`` this far ahead takes every workflow settled so far."""


def pruning(store: Store) -> Pruning:
    """``store`` as a :class:`Pruning` store, or a failure naming what it lacks."""
    if not isinstance(store, Pruning):
        pytest.fail(
            f"{type(store).__name__} cannot prune: give it the Pruning capability "
            "(durable_core.seams.retention), or leave RetentionContract out",
            pytrace=False,
        )
    return store


async def settled(
    store: Store,
    row: NewWorkflow,
    status: WorkflowStatus = WorkflowStatus.SUCCEEDED,
    *,
    history: bool = False,
) -> str:
    """Enqueue ``row``, lease it and settle it as ``status`` (with a step, a message and an
    event first, with ``history``); its id."""
    await store.enqueue([row])
    claimed = await store.acquire(row.id, worker_id="pruner", lease_seconds=30)
    assert claimed is not None
    lease = claimed.lease
    if history:
        await store.start_step(lease, 0, "one", "[]")
        await store.complete_step(lease, 0, json.dumps("done"))
        await store.send(row.id, "topic", json.dumps("hello"), "m-1")
        await store.set_event(lease, "stage", json.dumps("last"))
    error = None if status is WorkflowStatus.SUCCEEDED else '{"type": "builtins.ValueError"}'
    output = '"ok"' if status is WorkflowStatus.SUCCEEDED else None
    await store.settle(Settlement(lease, status, output=output, error=error))
    return row.id


class RetentionContract:
    """Tests of the :class:`~durable_core.seams.retention.Pruning` capability."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    async def test_a_prune_removes_settled_workflows_with_their_rows_as_its_dry_run_counted(
        self, durable_store: Store
    ) -> None:
        p, name = pruning(durable_store), unique_name()
        gone = [
            await settled(durable_store, new_workflow(name), status, history=True)
            for status in (WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED)
        ]
        which = PruneFilter(before=utcnow() + SOON, names=(name,))
        counted = await p.count_prunable(which)
        assert counted["workflows"] == 2
        assert counted["workflow_steps"] == 2 and counted["workflow_messages"] == 2
        assert counted["workflow_events"] == 2 and counted["workflow_attempts"] == 2

        assert await p.prune_workflows(which, limit=100) == counted
        for workflow_id in gone:
            assert await durable_store.get_workflow(workflow_id) is None
            assert await durable_store.load_steps(workflow_id) == []
        assert (await p.count_prunable(which))["workflows"] == 0
        assert (await p.prune_workflows(which, limit=100) or {}).get("workflows") == 0

    async def test_unfinished_workflows_and_those_a_parent_or_child_waits_on_are_kept(
        self, durable_store: Store
    ) -> None:
        p, name = pruning(durable_store), unique_name()
        pending = new_workflow(name)
        await durable_store.enqueue([pending])
        running = new_workflow(name)
        await durable_store.enqueue([running])
        assert await durable_store.acquire(running.id, worker_id="w", lease_seconds=30)
        orphan = new_workflow(name)
        child = await settled(
            durable_store,
            NewWorkflow(orphan.id, name, orphan.input, 3, parent_id=running.id),
        )
        parent = await settled(durable_store, new_workflow(name))
        young = new_workflow(name)
        await durable_store.enqueue([NewWorkflow(young.id, name, young.input, 3, parent_id=parent)])
        alone = await settled(durable_store, new_workflow(name))

        which = PruneFilter(before=utcnow() + SOON, names=(name,))
        assert (await p.count_prunable(which))["workflows"] == 1
        removed = await p.prune_workflows(which, limit=100)
        assert removed is not None and removed["workflows"] == 1
        assert await durable_store.get_workflow(alone) is None
        for kept in (pending.id, running.id, child, parent, young.id):
            assert await durable_store.get_workflow(kept) is not None

    async def test_age_status_name_and_queue_choose_what_goes(self, durable_store: Store) -> None:
        p, name, other = pruning(durable_store), unique_name(), unique_name()
        ok = await settled(durable_store, new_workflow(name))
        failed = await settled(durable_store, new_workflow(name), WorkflowStatus.FAILED)
        row = new_workflow(other)
        queued = await settled(
            durable_store, NewWorkflow(row.id, other, row.input, 3, queue="retention-q")
        )
        names = (name, other)
        assert (await p.count_prunable(PruneFilter(utcnow() - SOON, names=names)))["workflows"] == 0
        only_failed = PruneFilter(utcnow() + SOON, (WorkflowStatus.FAILED,), names=names)
        assert (await p.prune_workflows(only_failed, limit=10) or {})["workflows"] == 1
        assert await durable_store.get_workflow(failed) is None
        in_queue = PruneFilter(utcnow() + SOON, queues=("retention-q",), names=names)
        assert (await p.prune_workflows(in_queue, limit=10) or {})["workflows"] == 1
        assert await durable_store.get_workflow(queued) is None
        excepted = PruneFilter(utcnow() + SOON, names=names, except_names=(name,))
        assert (await p.count_prunable(excepted))["workflows"] == 0
        assert await durable_store.get_workflow(ok) is not None

    async def test_a_batch_takes_at_most_its_limit_the_oldest_first(
        self, durable_store: Store
    ) -> None:
        p, name = pruning(durable_store), unique_name()
        ids = [await settled(durable_store, new_workflow(name)) for _ in range(5)]
        which = PruneFilter(before=utcnow() + SOON, names=(name,))
        first = await p.prune_workflows(which, limit=2)
        assert first is not None and first["workflows"] == 2
        assert [await durable_store.get_workflow(i) is None for i in ids] == [
            True,
            True,
            False,
            False,
            False,
        ]
        newest = await p.newest_kept(which, 3)
        third = await durable_store.get_workflow(ids[2])
        assert third is not None and newest == third.completed_at
        assert await p.newest_kept(which, 4) is None
