"""What a running body asks its attempt for beyond steps and waits: events, streams,
updates, sends, child starts, ``now()``, ``random()`` and patches.

Each is one call through the door's :meth:`~durable_core.runtime.attempt.Attempt.effect`
or :meth:`~durable_core.runtime.attempt.Attempt.wait`, so each is journaled, replayed
and ordered after the writes it depends on as those are.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from ..seams.attributes import AttributeValue, attributes_of
from ..seams.plugins import message_sent
from ..seams.records import BodyCall, ClaimedWorkflow, Lease, NewWorkflow, StepStatus, WaitKind
from ..seams.roles import CallerStore
from ..seams.store import AttemptStore, Store
from ..seams.talk_roles import streams_of, updates_of
from .config import WorkflowConfig
from .journal import Call, Journal, derived_id

T = TypeVar("T")

Enqueue = Callable[[Sequence[NewWorkflow]], Awaitable[Sequence[str]]]
"""How a start's rows are written (a store's ``enqueue``, or its fenced ``enqueue_from``)."""


class Door(Protocol):
    """What :class:`Effects` uses of the attempt it is part of."""

    store: Store
    writes: AttemptStore
    lease: Lease
    claimed: ClaimedWorkflow
    config: WorkflowConfig
    clock: Callable[[], datetime]
    journal: Journal
    patches: dict[str, bool]

    async def persist(self, operation: Callable[[], Awaitable[T]]) -> T: ...

    async def effect(
        self,
        name: str,
        input_json: str,
        act: Callable[[Call], Awaitable[str]],
        *,
        records: bool = False,
    ) -> str: ...

    async def wait(
        self,
        name: str,
        input_json: str,
        *,
        kind: WaitKind,
        key: str,
        until: timedelta | datetime | None,
        over: Callable[[Call], Awaitable[str | None]],
        timed_out: Callable[[datetime], str],
    ) -> str: ...

    def _recorded(self, call: Call) -> None: ...

    def _replayed(self, call: Call) -> None: ...

    async def fence_checked(self, write: Callable[[], Awaitable[T]]) -> T: ...

    async def committed(self) -> None: ...


class Effects:
    """The attempt's effects beyond steps and waits (a part of
    :class:`~durable_core.runtime.attempt.Attempt`)."""

    async def set_event(self: Door, key: str, value: str) -> None:
        """Publish ``value`` under ``key`` for this workflow, once per call site."""

        input_json = json.dumps([key])

        async def publish(call: Call) -> str:
            written = _written(self.lease, call, input_json, "null")
            await self.writes.set_event(self.lease, key, value, call=written)
            return "null"

        await self.effect("durable.set_event", input_json, publish, records=True)

    async def write_stream(self: Door, key: str, value: str | None) -> int:
        """Append ``value`` to this workflow's stream ``key`` (``None`` closes it), once per
        call site: the value and the call's record are one transaction; its offset."""
        streams = streams_of(self.store)
        name = "durable.write_stream" if value is not None else "durable.close_stream"
        input_json = json.dumps([key])

        async def append(call: Call) -> str:
            at = await streams.write_stream(
                self.lease, key, value, call.index, name, input_json, path=call.stored_path
            )
            return str(at)

        return int(await self.effect(name, input_json, append, records=True))

    async def set_attributes(self: Door, values: dict[str, AttributeValue | None]) -> None:
        """Set (``None``: remove) this workflow's searchable attributes, once per call site:
        they and the call's record are one transaction."""
        attributes = attributes_of(self.store)
        name, input_json = "durable.set_attributes", json.dumps(sorted(values))

        async def write(call: Call) -> str:
            await attributes.record_attributes(
                self.lease, values, call.index, name, input_json, path=call.stored_path
            )
            return "null"

        await self.effect(name, input_json, write, records=True)

    async def recv_update(
        self: Door, name: str, until: timedelta | None, validate: Callable[[str], str | None]
    ) -> str:
        """The next update ``name`` (``[update id, payload JSON]`` as JSON), taken in the
        transaction that records this call, or ``"null"`` at the deadline. ``validate(payload)``
        returns an error JSON to reject one (it never enters the history) or ``None``."""
        updates = updates_of(self.store)
        step_name, input_json = "durable.recv_update", json.dumps([name])

        async def over(call: Call) -> str | None:
            workflow_id = self.claimed.id
            await self.committed()  # the update's row is taken after every write before it
            while True:
                found = await self.persist(lambda: updates.next_update(workflow_id, name))
                if found is None:
                    return None
                update_id = found.update_id
                refused = validate(found.payload)
                if refused is not None:
                    reject = functools.partial(
                        updates.reject_update, self.lease, update_id, refused
                    )
                    await self.persist(reject)
                    continue
                output = json.dumps([update_id, found.payload])
                take = functools.partial(
                    updates.take_update,
                    self.lease,
                    update_id,
                    call.index,
                    step_name,
                    input_json,
                    output,
                    path=call.stored_path,
                )
                taken = await self.persist(take)
                if taken:
                    self._recorded(call)
                    return output

        return await self.wait(
            step_name,
            input_json,
            kind=WaitKind.UPDATE,
            key=name,
            until=until,
            over=over,
            timed_out=lambda deadline: "null",
        )

    async def reply_update(self: Door, update_id: str, reply: str) -> None:
        """Reply ``reply`` to the update ``update_id`` this workflow took, once per call site."""
        updates = updates_of(self.store)
        input_json = json.dumps([update_id])

        async def answer(call: Call) -> str:
            written = _written(self.lease, call, input_json, "null")
            await updates.reply_update(self.lease, update_id, reply, call=written)
            return "null"

        await self.effect("durable.reply_update", input_json, answer, records=True)

    async def send(
        self: Door,
        workflow_id: str,
        topic: str,
        payload: str,
        idempotency_key: str | None,
        store: CallerStore | None = None,
    ) -> None:
        """Send ``payload`` to ``workflow_id``'s ``recv(topic)`` once per call site (its
        idempotency key derived from the call unless given), on ``store`` (this one): fenced
        by the lease and recorded in the transaction that sends, or, on another store,
        once the lease is renewed (:meth:`fence_checked`)."""

        target = store or self.store
        here = target is self.store
        input_json = json.dumps([workflow_id, topic])

        async def deliver(call: Call) -> str:
            key = idempotency_key or derived_id(self.claimed.id, call.path)
            if here:
                written = _written(self.lease, call, input_json, "null")
                await self.writes.send_from(written, workflow_id, topic, payload, key)
            else:
                await self.fence_checked(lambda: target.send(workflow_id, topic, payload, key))
            await message_sent(target, workflow_id, topic)
            return "null"

        await self.effect("durable.send", input_json, deliver, records=here)

    async def start(
        self: Door,
        rows: Sequence[NewWorkflow],
        chosen: Sequence[bool],
        write: Callable[[list[NewWorkflow], Enqueue | None], Awaitable[None]],
        *,
        children: bool,
    ) -> list[str]:
        """Start ``rows`` once per call site through ``write`` (given how to enqueue them);
        their ids. ``children`` (on this store) take ids derived from the call unless
        ``chosen[i]``, and this workflow as their parent, fenced by the lease and recorded
        in the transaction that starts them; others (on another store) keep the ids they
        have, started once the lease is renewed (:meth:`fence_checked`), recorded."""
        calls = json.dumps(
            [[row.name, row.id if named else None] for row, named in zip(rows, chosen, strict=True)]
        )
        parent = self.claimed.id

        async def start(call: Call) -> str:
            made = [
                dataclasses.replace(
                    row,
                    id=row.id if named else derived_id(parent, call.path, n),
                    parent_id=parent,
                )
                if children
                else row
                for n, (row, named) in enumerate(zip(rows, chosen, strict=True))
            ]
            output = json.dumps([row.id for row in made])
            if children:
                written = _written(self.lease, call, calls, output)
                await write(made, functools.partial(self.writes.enqueue_from, written))
            else:
                await self.fence_checked(lambda: write(made, None))
            return output

        started = await self.effect("durable.start", calls, start, records=children)
        return list(json.loads(started))

    async def now(self: Door) -> datetime:
        """The time, recorded the first time this call runs (a replay returns the same)."""

        async def read(call: Call) -> str:
            return json.dumps(self.clock().isoformat())

        return datetime.fromisoformat(json.loads(await self.effect("durable.now", "[]", read)))

    async def random(self: Door) -> float:
        """A random float in [0, 1), recorded the first time this call runs."""

        async def draw(call: Call) -> str:
            return json.dumps(random.random())

        return float(json.loads(await self.effect("durable.random", "[]", draw)))

    async def patched(self: Door, patch_id: str, name: str) -> bool:
        """Whether this run takes the new branch of the change ``patch_id`` (its marker
        step ``name``); see :mod:`durable_core.primitives.patching`."""
        decided = self.patches.get(patch_id)
        if decided is not None:
            return decided
        found = self.journal.peek()
        if found is not None and not (
            found.step_name == name and found.status is StepStatus.SUCCEEDED
        ):
            self.patches[patch_id] = False  # the old code ran here: the index is not used up
            return False

        async def mark(call: Call) -> str:
            return "true"

        await self.effect(name, json.dumps([patch_id]), mark)
        self.patches[patch_id] = True
        return True

    def deprecate_patch(self: Door, patch_id: str, name: str) -> None:
        """Replay past the marker of ``patch_id`` if the history has one; record nothing."""
        if self.patches.get(patch_id) is not None:
            return
        found = self.journal.peek()
        if found is not None and found.step_name == name:
            self._replayed(self.journal.call(name))
        self.patches[patch_id] = True

    async def fence_checked(self: Door, write: Callable[[], Awaitable[T]]) -> T:
        """``write()`` (a write its store cannot fence in its own transaction: on another
        store, or through a role that takes no lease) once the lease is renewed: refused,
        :class:`~durable_core.errors.LeaseLostError` and nothing written. Only a pause longer
        than the lease between the two lets a worker that lost it write."""
        await self.store.heartbeat(self.lease, self.config.lock_timeout_secs)
        return await write()


def _written(lease: Lease, call: Call, input_json: str, output: str) -> BodyCall:
    """``call`` as the store records it with its effect, under ``lease``."""
    return BodyCall(lease, call.index, call.name, input_json, output, call.stored_path)
