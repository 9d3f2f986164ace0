"""The waiting operations of the shared SQL store: suspending, messages and events.

:class:`WaitingOperations` is part of :class:`~durable_core.sql.store.SQLStore`;
it is kept apart because these rules come with their own locking protocol: a
workflow suspending locks its own row before it checks whether any of its waits
is already over, and whoever ends a wait (a sender, a settling child) locks the
waiting row before writing, so that one of the two always sees the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from ..errors import ConfigurationError, WorkflowNotFoundError
from ..seams.records import (
    MAX_TOPIC,
    BodyCall,
    Lease,
    Wait,
    WaitKind,
    check_topic,
    soonest_deadline,
    waiting_for_all,
)
from . import errors
from .base import SQLStoreBase
from .connector import Params, Session
from .updates import PENDING_UPDATE


class _StillRunning(Exception):
    """Rolls a suspension back: the wait was over before it began."""


class WaitingOperations(SQLStoreBase):
    """Suspend, receive, send, events (mixed into ``SQLStore``)."""

    async def record_step(
        self,
        lease: Lease,
        step_index: int,
        step_name: str,
        input: str,
        output: str,
        *,
        path: str | None = None,
    ) -> None:
        """Record a step that completed at once (a durable primitive) in one write."""
        await self.check_values(f"record_step {step_index}", input, output, step_name)
        await self._fenced(
            lease,
            "record_step",
            self.statements.record_step,
            f"recording step {step_index} ({step_name})",
            **_step_params(step_index, step_name, input, output, path),
        )

    async def suspend(self, lease: Lease, waits: Sequence[Wait]) -> bool:
        """Release the lease and leave the workflow ``waiting`` for the first of ``waits`` to
        end, each wait's step recorded as waiting (with its ``step_output``), due at the
        soonest deadline. Returns ``False``, changing nothing, when any wait is already over:
        a message is there, a child settled."""
        q = self.statements
        waiting_for = waiting_for_all(waits)
        held = {"workflow": lease.workflow_id, "token": lease.token}
        try:
            async with self._transaction("suspend") as session:
                bind = self.dialect.bind_clock
                suspended = {**held, "wake_at": soonest_deadline(waits), "waiting_for": waiting_for}
                # Our own row first (locked by these writes), then the conditions: a sender
                # or a settling child locks this row before it writes, so it either
                # committed before the check or finds the row waiting and wakes it.
                steps = [
                    bind(
                        {
                            **held,
                            **_step_params(
                                wait.step_index,
                                wait.step_name,
                                wait.step_input,
                                wait.step_output,
                                wait.step_path,
                            ),
                        }
                    )
                    for wait in waits
                ]
                # Each step write is fenced (it writes nothing without the lease), and so is
                # the row's: if that one is refused, the transaction rolls them all back.
                if len(steps) == 1:
                    held_steps = bool(await session.execute(q.wait_step, steps[0]))
                else:
                    await session.execute_many(q.wait_step, steps)
                    held_steps = True
                if not (held_steps and await session.execute(q.suspend, bind(suspended))):
                    raise errors.lease_lost(lease, f"suspending on {waiting_for}")
                for wait in waits:
                    over = self._over(lease, wait)
                    if over is not None and await session.fetch(over[0], bind(over[1])):
                        raise _StillRunning
        except _StillRunning:
            return False
        return True

    def _over(self, lease: Lease, wait: Wait) -> tuple[sa.Executable, Params] | None:
        """What finds ``wait`` already over, with its parameters: a message on its topic,
        its child settled (``None``: only its deadline ends it)."""
        q = self.statements
        if wait.kind is WaitKind.MESSAGE:
            return q.next_message, {"workflow": lease.workflow_id, "topic": wait.key}
        if wait.kind is WaitKind.CHILD:
            return q.settled, {"workflow": wait.key}
        if wait.kind is WaitKind.UPDATE:
            return PENDING_UPDATE, {"workflow": lease.workflow_id, "name": wait.key}
        return None

    async def receive(
        self,
        lease: Lease,
        topic: str,
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> str | None:
        """Take the oldest message on ``topic`` and record it as the step's output, in one
        transaction; ``None`` (nothing written) when there is none."""
        q = self.statements
        held = {"workflow": lease.workflow_id, "token": lease.token}
        async with self._transaction("receive") as session:
            bind = self.dialect.bind_clock
            # The workflow row before its messages, as a sender locks them: a redelivery
            # waiting on the message being taken here would otherwise deadlock with us.
            await session.fetch(q.lock, {"workflow": lease.workflow_id})
            found = await session.fetch(
                q.next_message, {"workflow": lease.workflow_id, "topic": topic}
            )
            if not found:
                return None
            payload: str = found[0]["payload"]
            await session.execute(q.consume_message, bind({"message": found[0]["seq"]}))
            step = _step_params(step_index, step_name, input, payload, path)
            if not await session.execute(q.record_step, bind({**held, **step})):
                raise errors.lease_lost(lease, f"receiving a message on {topic!r}")
        return payload

    async def send(self, workflow_id: str, topic: str, payload: str, message_id: str) -> None:
        """Put a message in ``workflow_id``'s inbox and wake it if it waits on ``topic``.

        A second send with the same ``message_id`` does nothing.
        """
        await self._check_message(workflow_id, topic, payload, message_id)
        async with self._transaction("send") as session:
            await self._deliver(session, workflow_id, topic, payload, message_id)

    async def send_from(
        self, call: BodyCall, workflow_id: str, topic: str, payload: str, message_id: str
    ) -> None:
        """:meth:`send` from a running body, fenced by ``call.lease`` and with ``call``
        recorded, in one transaction."""
        await self._check_message(workflow_id, topic, payload, message_id)
        await self._check_call(call)
        lease, what = call.lease, f"sending to workflow {workflow_id} on {topic!r}"
        async with self._transaction("send") as session:
            if await self._target_first(session, lease.workflow_id, workflow_id):
                await self._deliver(session, workflow_id, topic, payload, message_id)
                await self._fence(session, lease, what)
            else:
                await self._fence(session, lease, what)
                await self._deliver(session, workflow_id, topic, payload, message_id)
            await self._record_call(session, call, what)

    async def _target_first(self, session: Session, sender: str, target: str) -> bool:
        """Whether a body's send locks the target's row before its own: a parent's row
        before its child's (the order a settling or cancelled child locks them in), two
        unrelated rows in the order of their ids (two sending to each other never deadlock)."""
        if sender == target:
            return False
        rows = await session.fetch(self.statements.parents, {"workflow": sender, "other": target})
        parents = {row["id"]: row["parent_id"] for row in rows}
        if parents.get(sender) == target:
            return True
        return parents.get(target) != sender and target < sender

    async def _check_message(
        self, workflow_id: str, topic: str, payload: str, message_id: str
    ) -> None:
        check_topic(topic)
        await self.check_values(f"send to workflow {workflow_id}", payload, topic)
        for what, value, most in (("idempotency key", message_id, 64), ("topic", topic, MAX_TOPIC)):
            if len(value) > most:
                raise ConfigurationError(
                    f"a message's {what} is at most {most} characters, got {len(value)}: "
                    f"{value[:80]!r}"
                )

    async def _deliver(
        self, session: Session, workflow_id: str, topic: str, payload: str, message_id: str
    ) -> None:
        """Lock ``workflow_id``'s row, add the message (unless its id is there) and wake it if
        it waits on ``topic``, in the transaction ``session``."""
        q, bind = self.statements, self.dialect.bind_clock
        if not await session.fetch(q.lock, {"workflow": workflow_id}):
            raise WorkflowNotFoundError(
                f"cannot send to workflow {workflow_id!r}: no such workflow in {self._description}"
            )
        message = {
            "workflow": workflow_id,
            "topic": topic,
            "message_id": message_id,
            "payload": payload,
        }
        if not await session.execute(q.send, bind(message)):
            return
        waiting_for = f"{WaitKind.MESSAGE.value}:{topic}"
        await session.execute(q.wake, bind({"workflow": workflow_id, "waiting_for": waiting_for}))

    async def set_event(
        self, lease: Lease, key: str, value: str, *, call: BodyCall | None = None
    ) -> None:
        """Publish ``value`` under ``key`` for the workflow holding ``lease``; with ``call``,
        record it in the same transaction."""
        await self.check_values(f"set_event {key!r}", value, key)
        q, what = self.statements, f"setting event {key!r}"
        if call is None:
            await self._fenced(lease, "set_event", q.set_event, what, key=key, value=value)
            return
        await self._check_call(call)
        params = {"workflow": lease.workflow_id, "token": lease.token, "key": key, "value": value}
        async with self._transaction("set_event") as session:
            await self._fence(session, lease, what)
            if not await session.execute(q.set_event, self.dialect.bind_clock(params)):
                raise errors.lease_lost(lease, what)
            await self._record_call(session, call, what)

    async def get_event(self, workflow_id: str, key: str) -> str | None:
        """The value a workflow published under ``key``, or ``None``."""
        params = {"workflow": workflow_id, "key": key}
        rows = await self._fetch("get_event", self.statements.get_event, params)
        return rows[0]["value"] if rows else None


def _step_params(index: int, name: str, input: str, output: str, path: str | None) -> Params:
    return {
        "index": index,
        "step_name": name,
        "input": input,
        "output_json": output,
        "path": path,
    }
