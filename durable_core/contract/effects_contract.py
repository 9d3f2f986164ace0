"""``EffectsContract``: what a running body writes beyond its steps, through its
:class:`~durable_core.seams.roles.AttemptStore` (``send_from``, ``enqueue_from``,
``set_event`` with its call): each effect is fenced by the body's lease and recorded as the
body's call in the transaction that writes it, or refused with nothing written.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable

import anyio
import pytest

from ..errors import LeaseLostError
from ..seams.records import BodyCall, Lease, StepStatus, WaitKind, WorkflowStatus
from ..seams.store import Store
from .base import STALE_KINDS, ContractBase, wait_for
from .support import new_workflow, snapshot

_EFFECTS = ("send", "child_start", "set_event")


def body_call(lease: Lease, index: int, name: str, input: str, output: str = "null") -> BodyCall:
    """The body's call at ``index`` under ``lease``."""
    return BodyCall(lease, index, name, input, output, path=str(index))


class EffectsContract(ContractBase):
    """Tests of a running body's effects (:class:`~durable_core.seams.roles.AttemptStore`)."""

    async def _received(self, store: Store, workflow_id: str, topic: str) -> list[str]:
        """Every message on ``topic`` of ``workflow_id``, taken under a lease of its own."""
        claimed = await store.acquire(
            workflow_id, worker_id="reader", lease_seconds=30, due_only=False
        )
        assert claimed is not None
        taken: list[str] = []
        while True:
            found = await store.receive(claimed.lease, topic, len(taken), "durable.recv", "[]")
            if found is None:
                return taken
            taken.append(found)

    async def test_a_body_sends_with_its_call_recorded(self, durable_store: Store) -> None:
        sender = await self._held(durable_store)
        target = await self._held(durable_store)
        assert await durable_store.suspend(target.lease, [wait_for(WaitKind.MESSAGE, "t")])
        call = body_call(sender.lease, 0, "durable.send", json.dumps([target.id, "t"]))
        await durable_store.send_from(call, target.id, "t", '"hi"', "m-1")
        [step] = await durable_store.load_steps(sender.id)
        assert (step.step_index, step.step_name, step.status, step.input, step.output) == (
            0,
            "durable.send",
            StepStatus.SUCCEEDED,
            call.input,
            "null",
        )
        assert step.path == "0"
        woken = await self.record(durable_store, target.id)
        assert woken.status is WorkflowStatus.PENDING, "the send woke the waiting target"
        # A replay that lost its record sends again under the same id: nothing more arrives.
        again = dataclasses.replace(call, index=1, path="1")
        await durable_store.send_from(again, target.id, "t", '"again"', "m-1")
        assert len(await durable_store.load_steps(sender.id)) == 2
        assert await self._received(durable_store, target.id, "t") == ['"hi"']

    async def test_a_body_sends_to_itself(self, durable_store: Store) -> None:
        claimed = await self._held(durable_store)
        call = body_call(claimed.lease, 0, "durable.send", json.dumps([claimed.id, "self"]))
        await durable_store.send_from(call, claimed.id, "self", '"me"', "m-self")
        assert await durable_store.receive(claimed.lease, "self", 1, "durable.recv", "[]") == (
            '"me"'
        )

    async def test_a_body_starts_children_with_its_call_recorded(
        self, durable_store: Store
    ) -> None:
        parent = await self._held(durable_store)
        rows = [dataclasses.replace(new_workflow(), parent_id=parent.id) for _ in range(2)]
        ids = [row.id for row in rows]
        call = body_call(parent.lease, 0, "durable.start", "[]", json.dumps(ids))
        assert list(await durable_store.enqueue_from(call, rows)) == ids
        for row in rows:
            child = await self.record(durable_store, row.id)
            assert (child.status, child.parent_id) == (WorkflowStatus.PENDING, parent.id)
        [step] = await durable_store.load_steps(parent.id)
        assert (step.step_index, step.step_name, step.status, step.output) == (
            0,
            "durable.start",
            StepStatus.SUCCEEDED,
            json.dumps(ids),
        )
        # A replay that lost its record starts them again: nothing more is written.
        again = dataclasses.replace(call, index=1, path="1")
        assert list(await durable_store.enqueue_from(again, rows)) == []
        assert len(await durable_store.load_steps(parent.id)) == 2

    async def test_a_body_publishes_an_event_with_its_call_recorded(
        self, durable_store: Store
    ) -> None:
        claimed = await self._held(durable_store)
        call = body_call(claimed.lease, 0, "durable.set_event", '["stage"]')
        await durable_store.set_event(claimed.lease, "stage", '"one"', call=call)
        assert await durable_store.get_event(claimed.id, "stage") == '"one"'
        [step] = await durable_store.load_steps(claimed.id)
        assert (step.step_index, step.step_name, step.status) == (
            0,
            "durable.set_event",
            StepStatus.SUCCEEDED,
        )

    @pytest.mark.parametrize("kind", STALE_KINDS)
    @pytest.mark.parametrize("effect", _EFFECTS)
    async def test_a_lease_that_lost_the_workflow_cannot_write_an_effect(
        self, durable_store: Store, kind: str, effect: str
    ) -> None:
        target = await self.enqueue_one(durable_store)
        stale, current = await self.stale_lease(durable_store, kind)
        child = dataclasses.replace(new_workflow(), parent_id=stale.workflow_id)
        writes: dict[str, Callable[[], Awaitable[object]]] = {
            "send": lambda: durable_store.send_from(
                body_call(stale, 2, "durable.send", "[]"), target, "t", '"late"', "m-late"
            ),
            "child_start": lambda: durable_store.enqueue_from(
                body_call(stale, 2, "durable.start", "[]", json.dumps([child.id])), [child]
            ),
            "set_event": lambda: durable_store.set_event(
                stale, "late", '"late"', call=body_call(stale, 2, "durable.set_event", "[]")
            ),
        }
        before = await snapshot(durable_store, stale.workflow_id)
        with pytest.raises(LeaseLostError):
            await writes[effect]()
        assert await snapshot(durable_store, stale.workflow_id) == before, "no call recorded"
        assert await self._received(durable_store, target, "t") == [], "no message sent"
        assert await durable_store.get_workflow(child.id) is None, "no child started"
        assert await durable_store.get_event(stale.workflow_id, "late") is None, "no event"
        if current is not None:  # the lease that holds it writes its effects
            call = body_call(current, 2, "durable.set_event", "[]")
            await durable_store.set_event(current, "late", '"current"', call=call)
            assert await durable_store.get_event(stale.workflow_id, "late") == '"current"'

    async def test_bodies_sending_to_each_other_at_once_never_deadlock(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        """Parent and child, and two unrelated workflows, send to each other at once, over
        and over (on two instances): each send locks both rows; none waits on another for
        ever (a deadlock the database breaks would fail one)."""
        parent, child = await self._parent_and_child(durable_store)
        one, other = await self._held(durable_store), await self._held(durable_store)
        pairs = [(parent, child), (child, parent), (one, other), (other, one)]
        rounds = self.concurrent_writers

        async def send(n: int, store: Store, sender: Lease, to: str) -> None:
            call = body_call(sender, n, "durable.send", json.dumps([to, "t"]))
            await store.send_from(call, to, "t", json.dumps(n), f"m-{sender.workflow_id[:8]}-{n}")

        for n in range(rounds):
            async with anyio.create_task_group() as tg:
                for i, (sender, to) in enumerate(pairs):
                    store = durable_store if i % 2 else durable_second_store
                    tg.start_soon(send, n, store, sender.lease, to.id)
        for sender, _ in pairs:
            assert len(await durable_store.load_steps(sender.id)) == rounds
        for to in (parent, child, one, other):
            got = await durable_store.receive(to.lease, "t", rounds, "durable.recv", "[]")
            assert got == "0", f"{to.id} received the first of its {rounds} messages first"
