"""``StreamsContract`` and ``UpdatesContract``: what a store with the
:class:`~durable_core.seams.store.Streams` or :class:`~durable_core.seams.store.Updates`
role must do
(schema version 7). A store that has a role adds its class to its contract test class::

    class TestMyStore(StoreContract, NoClaimerContract, StreamsContract, UpdatesContract):
        pass
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from ..errors import (
    LeaseLostError,
    StreamClosedError,
    UpdateConflictError,
    UpdateNotHandledError,
    WorkflowNotFoundError,
)
from ..seams.records import (
    BodyCall,
    ClaimedWorkflow,
    Lease,
    Settlement,
    StepStatus,
    UpdateStatus,
    Wait,
    WaitKind,
    WorkflowStatus,
)
from ..seams.store import Store, Streams, Updates
from .base import STALE_KINDS, stale_lease
from .support import new_workflow, snapshot


def streams(store: Store) -> Streams:
    """``store`` as a :class:`Streams`, or a failure naming what it lacks."""
    if not isinstance(store, Streams):
        pytest.fail(
            f"{type(store).__name__} is not a Streams store (write_stream, read_stream, "
            "watch): build it on durable_core.sql.SQLStore, or leave StreamsContract out",
            pytrace=False,
        )
    return store


async def held(store: Store, **options: Any) -> ClaimedWorkflow:
    """A new workflow of ``store``, leased."""
    row = new_workflow(**options)
    await store.enqueue([row])
    claimed = await store.acquire(row.id, worker_id="talker", lease_seconds=30)
    assert claimed is not None
    return claimed


class StreamsContract:
    """Tests of the :class:`~durable_core.seams.store.Streams` role."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    async def test_values_take_the_next_offsets_with_their_steps_recorded(
        self, durable_store: Store
    ) -> None:
        s = streams(durable_store)
        claimed = await held(durable_store)
        lease, name = claimed.lease, "durable.write_stream"
        offsets = [await s.write_stream(lease, "k", f'"v{i}"', i, name, '["k"]') for i in range(3)]
        assert offsets == [0, 1, 2]
        assert await s.write_stream(lease, "other", '"o"', 3, name, '["other"]', path="3") == 0
        steps = await durable_store.load_steps(claimed.id)
        assert [(x.step_index, x.step_name, x.status, x.output) for x in steps] == [
            (0, name, StepStatus.SUCCEEDED, "0"),
            (1, name, StepStatus.SUCCEEDED, "1"),
            (2, name, StepStatus.SUCCEEDED, "2"),
            (3, name, StepStatus.SUCCEEDED, "0"),
        ]
        page = await s.read_stream(claimed.id, "k")
        assert (page.entries, page.closed) == ([(0, '"v0"'), (1, '"v1"'), (2, '"v2"')], False)
        page = await s.read_stream(claimed.id, "k", offset=1, limit=1)
        assert (page.entries, page.closed) == ([(1, '"v1"')], False)
        page = await s.read_stream(claimed.id, "k", offset=3)
        assert (page.entries, page.closed) == ([], False)
        assert (await s.read_stream(claimed.id, "other")).entries == [(0, '"o"')]
        assert (await s.read_stream(claimed.id, "none")).entries == []
        assert (await s.read_stream("no-such-workflow", "k")).entries == []

    async def test_a_closed_key_reads_closed_and_refuses_more_values(
        self, durable_store: Store
    ) -> None:
        s = streams(durable_store)
        claimed = await held(durable_store)
        lease = claimed.lease
        await s.write_stream(lease, "k", "1", 0, "durable.write_stream", '["k"]')
        assert await s.write_stream(lease, "k", None, 1, "durable.close_stream", '["k"]') == 1
        page = await s.read_stream(claimed.id, "k")
        assert (page.entries, page.closed) == ([(0, "1")], True)
        assert (await s.read_stream(claimed.id, "k", offset=1)).closed
        with pytest.raises(StreamClosedError, match="after closing it"):
            await s.write_stream(lease, "k", "2", 2, "durable.write_stream", '["k"]')
        assert len(await durable_store.load_steps(claimed.id)) == 2, (
            "the refused write recorded nothing"
        )

    async def test_a_write_without_the_lease_writes_nothing(self, durable_store: Store) -> None:
        s = streams(durable_store)
        claimed = await held(durable_store)
        await durable_store.settle(
            Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="null")
        )
        with pytest.raises(LeaseLostError):
            await s.write_stream(claimed.lease, "k", "1", 0, "durable.write_stream", '["k"]')
        assert (await s.read_stream(claimed.id, "k")).entries == []
        assert await durable_store.load_steps(claimed.id) == []

    @pytest.mark.parametrize("kind", STALE_KINDS)
    async def test_a_lease_that_lost_the_workflow_cannot_write_to_a_stream(
        self, durable_store: Store, kind: str
    ) -> None:
        s = streams(durable_store)
        stale, _ = await stale_lease(durable_store, kind)
        before = await snapshot(durable_store, stale.workflow_id)
        with pytest.raises(LeaseLostError):
            await s.write_stream(stale, "k", '"late"', 2, "durable.write_stream", '["k"]')
        assert (await s.read_stream(stale.workflow_id, "k")).entries == []
        assert await snapshot(durable_store, stale.workflow_id) == before

    async def test_a_watch_returns_after_a_write_or_its_timeout(self, durable_store: Store) -> None:
        s = streams(durable_store)
        claimed = await held(durable_store)
        watch = s.watch(claimed.id)
        try:
            await watch.wait(0.01)  # a first wait may return at once (the watch starts)
            if not watch.notified:
                await watch.wait(0.01)  # a polling watch returns after its timeout
                return
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    await s.write_stream(claimed.lease, "k", "1", 0, "durable.write_stream", "[]")

                tg.start_soon(write)
                with anyio.fail_after(30):  # far sooner than the hour it would wait
                    await watch.wait(3600)
            assert (await s.read_stream(claimed.id, "k")).entries == [(0, "1")]
        finally:
            await watch.close()


def updates(store: Store) -> Updates:
    """``store`` as an :class:`Updates`, or a failure naming what it lacks."""
    if not isinstance(store, Updates):
        pytest.fail(
            f"{type(store).__name__} is not an Updates store (send_update, get_update, "
            "next_update, take_update, reject_update, reply_update, watch): build it on "
            "durable_core.sql.SQLStore, or leave UpdatesContract out",
            pytrace=False,
        )
    return store


class UpdatesContract:
    """Tests of the :class:`~durable_core.seams.store.Updates` role."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    async def test_a_sent_update_is_kept_once_by_its_id(self, durable_store: Store) -> None:
        u = updates(durable_store)
        claimed = await held(durable_store)
        sent = await u.send_update(claimed.id, "u1", "approve", '{"n": 1}')
        assert (sent.status, sent.name, sent.payload) == (
            UpdateStatus.PENDING,
            "approve",
            '{"n": 1}',
        )
        again = await u.send_update(claimed.id, "u1", "approve", '{"n":1}')  # same JSON value
        assert again.status is UpdateStatus.PENDING
        with pytest.raises(UpdateConflictError, match="another payload"):
            await u.send_update(claimed.id, "u1", "approve", '{"n": 2}')
        with pytest.raises(UpdateConflictError):
            await u.send_update(claimed.id, "u1", "other", '{"n": 1}')
        with pytest.raises(WorkflowNotFoundError):
            await u.send_update("no-such-workflow", "u1", "approve", "1")
        found = await u.get_update(claimed.id, "u1")
        assert found is not None and found.status is UpdateStatus.PENDING
        assert await u.get_update(claimed.id, "nope") is None

    async def test_updates_are_taken_oldest_first_with_their_step_recorded(
        self, durable_store: Store
    ) -> None:
        u = updates(durable_store)
        claimed = await held(durable_store)
        for n in (1, 2):
            await u.send_update(claimed.id, f"u{n}", "approve", str(n))
        await u.send_update(claimed.id, "o1", "other", "9")
        first = await u.next_update(claimed.id, "approve")
        assert first is not None and first.update_id == "u1"
        name = "durable.recv_update"
        assert await u.take_update(claimed.lease, "u1", 0, name, '["approve"]', '["u1","1"]')
        assert not await u.take_update(claimed.lease, "u1", 1, name, '["approve"]', "[]")
        second = await u.next_update(claimed.id, "approve")
        assert second is not None and second.update_id == "u2"
        [step] = await durable_store.load_steps(claimed.id)
        assert (step.step_index, step.step_name, step.output) == (0, name, '["u1","1"]')
        taken = await u.get_update(claimed.id, "u1")
        assert taken is not None and taken.status is UpdateStatus.TAKEN

    async def test_a_reply_or_rejection_is_written_once_under_the_lease(
        self, durable_store: Store
    ) -> None:
        u = updates(durable_store)
        claimed = await held(durable_store)
        await u.send_update(claimed.id, "u1", "approve", "1")
        await u.send_update(claimed.id, "u2", "approve", "-1")
        await u.take_update(claimed.lease, "u1", 0, "durable.recv_update", "[]", "[]")
        await u.reply_update(claimed.lease, "u1", '"yes"')
        await u.reply_update(claimed.lease, "u1", '"again"')  # a replayed reply
        replied = await u.get_update(claimed.id, "u1")
        assert replied is not None
        assert (replied.status, replied.reply) == (UpdateStatus.REPLIED, '"yes"')
        await u.reject_update(claimed.lease, "u2", '{"message": "negative"}')
        rejected = await u.get_update(claimed.id, "u2")
        assert rejected is not None and rejected.status is UpdateStatus.REJECTED
        assert rejected.error == '{"message": "negative"}'
        assert await u.next_update(claimed.id, "approve") is None
        await u.send_update(claimed.id, "u3", "approve", "3")
        await u.take_update(claimed.lease, "u3", 1, "durable.recv_update", "[]", "[]")
        await durable_store.settle(
            Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="null")
        )
        with pytest.raises(LeaseLostError):
            await u.reply_update(claimed.lease, "u3", '"late"')
        late = await u.get_update(claimed.id, "u3")
        assert late is not None and late.status is UpdateStatus.TAKEN
        with pytest.raises(UpdateNotHandledError, match="it is succeeded"):
            await u.send_update(claimed.id, "u4", "approve", "4")

    async def test_a_reply_with_its_call_records_the_call(self, durable_store: Store) -> None:
        u = updates(durable_store)
        claimed = await held(durable_store)
        await u.send_update(claimed.id, "u1", "approve", "1")
        await u.take_update(claimed.lease, "u1", 0, "durable.recv_update", "[]", "[]")
        call = BodyCall(claimed.lease, 1, "durable.reply_update", '["u1"]', "null", "1")
        await u.reply_update(claimed.lease, "u1", '"yes"', call=call)
        replied = await u.get_update(claimed.id, "u1")
        assert replied is not None and (replied.status, replied.reply) == (
            UpdateStatus.REPLIED,
            '"yes"',
        )
        steps = await durable_store.load_steps(claimed.id)
        assert [(x.step_index, x.step_name, x.status, x.path) for x in steps] == [
            (0, "durable.recv_update", StepStatus.SUCCEEDED, None),
            (1, "durable.reply_update", StepStatus.SUCCEEDED, "1"),
        ]

    @pytest.mark.parametrize("kind", STALE_KINDS)
    async def test_a_lease_that_lost_the_workflow_cannot_reply(
        self, durable_store: Store, kind: str
    ) -> None:
        u = updates(durable_store)

        async def take(lease: Lease) -> None:
            await u.send_update(lease.workflow_id, "u1", "approve", "1")
            assert await u.take_update(lease, "u1", 2, "durable.recv_update", "[]", "[]")

        stale, _ = await stale_lease(durable_store, kind, first=take)
        before = await snapshot(durable_store, stale.workflow_id)
        taken = await u.get_update(stale.workflow_id, "u1")
        call = BodyCall(stale, 3, "durable.reply_update", '["u1"]', "null")
        with pytest.raises(LeaseLostError):
            await u.reply_update(stale, "u1", '"late"', call=call)
        assert await u.get_update(stale.workflow_id, "u1") == taken, "no reply written"
        assert await snapshot(durable_store, stale.workflow_id) == before

    async def test_a_pending_update_ends_a_wait_on_its_name(self, durable_store: Store) -> None:
        u = updates(durable_store)
        claimed = await held(durable_store)
        wait = Wait(WaitKind.UPDATE, "approve", None, 0, "durable.recv_update", '["approve"]')
        assert await durable_store.suspend(claimed.lease, [wait])
        row = await durable_store.get_workflow(claimed.id)
        assert row is not None and row.waiting_for == "update:approve"
        await u.send_update(claimed.id, "other-name", "reject", "1")
        row = await durable_store.get_workflow(claimed.id)
        assert row is not None and row.status is WorkflowStatus.WAITING
        await u.send_update(claimed.id, "u1", "approve", "1")
        row = await durable_store.get_workflow(claimed.id)
        assert row is not None and row.status is WorkflowStatus.PENDING, "the update woke it"
        again = await durable_store.acquire(claimed.id, worker_id="talker", lease_seconds=30)
        assert again is not None
        assert not await durable_store.suspend(again.lease, [wait]), "an update is there"
