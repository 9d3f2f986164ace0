"""The waiting operations of the shared SQL store: suspending, messages and events.

:class:`WaitingOperations` is part of :class:`~durable_core.sql.store.SQLStore`;
it is kept apart because these rules come with their own locking protocol: a
workflow suspending locks its own row before it checks whether its wait is
already over, and whoever ends a wait (a sender, a settling child) locks the
waiting row before writing, so that one of the two always sees the other.
"""

from __future__ import annotations

from ..errors import ConfigurationError, WorkflowNotFoundError
from ..records import FOREVER, MAX_TOPIC, Lease, Wait, WaitKind
from . import errors
from .base import SQLStoreBase
from .connector import Params


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

    async def suspend(self, lease: Lease, wait: Wait, output: str) -> bool:
        """Release the lease and leave the workflow ``waiting`` for ``wait``, with its step
        recorded as waiting (``output`` holds the deadline). Returns ``False``, changing
        nothing, when the wait is already over: a message is there, the child settled."""
        q = self.statements
        deadline = FOREVER if wait.deadline is None else wait.deadline
        held = {"workflow": lease.workflow_id, "token": lease.token}
        step = _step_params(wait.step_index, wait.step_name, wait.step_input, output, None)
        over = {WaitKind.MESSAGE: q.next_message, WaitKind.CHILD: q.settled}.get(wait.kind)
        check = {
            WaitKind.MESSAGE: {"workflow": lease.workflow_id, "topic": wait.key},
            WaitKind.CHILD: {"workflow": wait.key},
        }.get(wait.kind, {})
        try:
            async with self._transaction("suspend") as session:
                bind = self.dialect.bind_clock
                suspended = {**held, "wake_at": deadline, "waiting_for": wait.waiting_for}
                # Our own row first (locked by these writes), then the condition: a sender
                # or a settling child locks this row before it writes, so it either
                # committed before the check or finds the row waiting and wakes it.
                if not (
                    await session.execute(q.wait_step, bind({**held, **step}))
                    and await session.execute(q.suspend, bind(suspended))
                ):
                    raise errors.lease_lost(lease, f"suspending on {wait.waiting_for}")
                if over is not None and await session.fetch(over, bind(check)):
                    raise _StillRunning
        except _StillRunning:
            return False
        return True

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
        await self.check_values(f"send to workflow {workflow_id}", payload, topic)
        for what, value, most in (("idempotency key", message_id, 64), ("topic", topic, MAX_TOPIC)):
            if len(value) > most:
                raise ConfigurationError(
                    f"a message's {what} is at most {most} characters, got {len(value)}: "
                    f"{value[:80]!r}"
                )
        q = self.statements
        async with self._transaction("send") as session:
            bind = self.dialect.bind_clock
            if not await session.fetch(q.lock, {"workflow": workflow_id}):
                raise WorkflowNotFoundError(
                    f"cannot send to workflow {workflow_id!r}: no such workflow in "
                    f"{self._description}"
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
            await session.execute(
                q.wake, bind({"workflow": workflow_id, "waiting_for": waiting_for})
            )

    async def set_event(self, lease: Lease, key: str, value: str) -> None:
        """Publish ``value`` under ``key`` for the workflow holding ``lease``."""
        await self.check_values(f"set_event {key!r}", value, key)
        await self._fenced(
            lease,
            "set_event",
            self.statements.set_event,
            f"setting event {key!r}",
            key=key,
            value=value,
        )

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
