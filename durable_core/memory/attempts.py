"""The memory store's running side: taking a workflow's lease, the attempt's fenced writes
(steps, settling, suspending, messages, events) and the attempt's history.

The rules are :mod:`durable_core.sql.store`'s, :mod:`durable_core.sql.statements`' and
:mod:`durable_core.sql.waiting`'s. A suspension checks its waits under the same lock that a
sender, a settling child or an update's caller takes to wake it, so no wake-up is lost.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from ..errors import (
    ConfigurationError,
    CorruptRecordError,
    InvalidArgumentsError,
    WorkflowNotFoundError,
)
from ..seams.records import (
    MAX_TOPIC,
    BodyCall,
    ClaimedWorkflow,
    Lease,
    Settlement,
    StepRecord,
    StepStatus,
    UpdateStatus,
    Wait,
    WaitKind,
    WorkflowStatus,
    check_topic,
    settled_outcome,
    soonest_deadline,
    waiting_for_all,
)
from ..sql import errors
from ..sql.rows import claimed_from_row, step_from_row
from .base import MemoryBase
from .tables import Row, Tables, now, release

_PENDING = WorkflowStatus.PENDING.value
_RUNNING = WorkflowStatus.RUNNING.value
_WAITING = WorkflowStatus.WAITING.value


class AttemptOperations(MemoryBase):
    """Acquire, heartbeat, step writes, settle, suspend, receive, send, events."""

    # -- leases ------------------------------------------------------------------------------

    async def acquire(
        self, workflow_id: str, *, worker_id: str, lease_seconds: float, due_only: bool = True
    ) -> ClaimedWorkflow | None:
        """Lease one runnable workflow by id (one more attempt), or return ``None``."""
        t = await self._begin()
        with t.lock:
            at = now()
            row = t.workflows.get(workflow_id)
            if row is None or not _runnable(row, at, due_only=due_only):
                return None
            prior = dict(row)
            token = str(uuid.uuid4())
            row.update(
                status=_RUNNING,
                attempts=row["attempts"] + 1,
                locked_by=worker_id,
                lock_token=token,
                locked_until=at + timedelta(seconds=float(lease_seconds)),
                waiting_for=None,
                updated_at=at,
            )
            if row["started_at"] is None:
                row["started_at"] = at
            reclaimed = prior["status"] == _RUNNING
            claimed_row = {
                **row,
                "run_at": prior["run_at"],
                "crashed_worker": prior["locked_by"] if reclaimed else None,
                "crashed_at": prior["locked_until"] if reclaimed else None,
            }
            steps = self._cached_steps(t, workflow_id)
        claimed = claimed_from_row(claimed_row, worker_id, steps=False, crashed=True)
        claimed.steps = steps
        return claimed

    def _cached_steps(self, t: Tables, workflow_id: str) -> tuple[StepRecord, ...] | None:
        """The steps a claim hands over (``None``: one is corrupt; the executor loads them
        itself and settles the corruption on this workflow alone)."""
        try:
            return tuple(
                step_from_row(workflow_id, step)
                for _, step in sorted(t.steps.get(workflow_id, {}).items())
            )
        except CorruptRecordError:
            return None

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        """Extend the lease to ``lease_seconds`` from now."""
        t = await self._begin()
        with t.lock:
            row = self._fence(t, lease, "renewing the lease")
            at = now()
            row.update(locked_until=at + timedelta(seconds=float(lease_seconds)), updated_at=at)

    async def record_attempt(
        self, lease: Lease, outcome: str, error: str | None, ended_at: datetime | None = None
    ) -> None:
        """Record how the attempt of ``lease`` ended when it did not settle itself."""
        t = await self._begin()
        with t.lock:
            attempt_history(t, lease, outcome, error, ended_at or now())

    # -- steps -------------------------------------------------------------------------------

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        """Record a step as running (insert, or reset an earlier run as one more try)."""
        t = await self._begin()
        with t.lock:
            self._fence(t, lease, f"recording step {step_index} ({step_name})")
            self._put_step(
                t,
                lease.workflow_id,
                step_index,
                name=step_name,
                status=StepStatus.RUNNING,
                input=input,
                output=None,
                at=now(),
                path=path,
                new_try=True,
            )

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        """Record a started step's output as succeeded."""
        t = await self._begin()
        with t.lock:
            step = self._started(t, lease, step_index, f"complete_step for step {step_index}")
            step.update(
                status=StepStatus.SUCCEEDED.value, output=output, error=None, completed_at=now()
            )

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        """Record a started step's error as failed, and keep the failed try."""
        t = await self._begin()
        with t.lock:
            step = self._started(t, lease, step_index, f"fail_step for step {step_index}")
            step.update(status=StepStatus.FAILED.value, error=error, completed_at=now())
            t.step_tries.setdefault(lease.workflow_id, []).append(
                {
                    "seq": t.next_seq(),
                    "step_index": step_index,
                    "try_number": step["attempts"],
                    "started_at": step["started_at"],
                    "ended_at": step["completed_at"],
                    "error": error,
                }
            )

    def _started(self, t: Tables, lease: Lease, index: int, what: str) -> Row:
        """The step row ``index`` of the workflow ``lease`` holds (an update of a row that is
        not there changes nothing, which the SQL stores read as a lost lease too)."""
        self._fence(t, lease, what)
        step = t.steps.get(lease.workflow_id, {}).get(index)
        if step is None:
            raise errors.lease_lost(lease, what)
        return step

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
        call = BodyCall(lease, step_index, step_name, input, output, path)
        t = await self._begin()
        with t.lock:
            self._record_call(t, call, f"recording step {step_index} ({step_name})", now())

    # -- settling ----------------------------------------------------------------------------

    async def settle(self, settlement: Settlement) -> None:
        """End the attempt as ``settlement.status`` and release the lease; a final status
        wakes the parent ``settlement.parent_id`` if it waits on this workflow."""
        lease, status = settlement.lease, settlement.status
        if settlement.step is not None:
            raise InvalidArgumentsError(
                f"settle of workflow {lease.workflow_id}: a settlement's step is written by a "
                "group commit (BatchWriter.write_batch), not by Store.settle"
            )
        t = await self._begin()
        with t.lock:
            row = self._fence(t, lease, f"settling as {status.value}")
            at = now()
            row.update(status=status.value, output=settlement.output, error=settlement.error)
            if status is WorkflowStatus.PENDING:
                row["run_at"] = at + timedelta(seconds=float(settlement.retry_delay_seconds))
            else:
                row["completed_at"] = at
            release(row, at)
            attempt_history(t, lease, settled_outcome(status), settlement.error, at)
            if status is not WorkflowStatus.PENDING and settlement.parent_id is not None:
                self._wake(t, settlement.parent_id, f"child:{lease.workflow_id}", at)

    # -- waiting -----------------------------------------------------------------------------

    async def suspend(self, lease: Lease, waits: Sequence[Wait]) -> bool:
        """Release the lease and leave the workflow waiting for the first of ``waits``, each
        wait's step recorded as waiting; ``False``, changing nothing, when one is over."""
        waiting_for = waiting_for_all(waits)
        t = await self._begin()
        with t.lock:
            row = self._fence(t, lease, f"suspending on {waiting_for}")
            if any(self._over(t, lease.workflow_id, wait) for wait in waits):
                return False
            at = now()
            for wait in waits:
                self._put_step(
                    t,
                    lease.workflow_id,
                    wait.step_index,
                    name=wait.step_name,
                    status=StepStatus.WAITING,
                    input=wait.step_input,
                    output=wait.step_output,
                    at=at,
                    path=wait.step_path,
                    keep_error=True,
                )
            row.update(
                status=_WAITING,
                attempts=row["attempts"] - 1,  # the claim that resumes it counts one
                run_at=soonest_deadline(waits),
                waiting_for=waiting_for,
            )
            release(row, at)
        return True

    def _over(self, t: Tables, workflow_id: str, wait: Wait) -> bool:
        """Whether ``wait`` is over already: a message on its topic, its child settled, an
        update of its name pending (a deadline alone ends the others)."""
        if wait.kind is WaitKind.MESSAGE:
            return _next_message(t, workflow_id, wait.key) is not None
        if wait.kind is WaitKind.CHILD:
            child = t.workflows.get(wait.key)
            return child is not None and WorkflowStatus(child["status"]).is_terminal
        if wait.kind is WaitKind.UPDATE:
            return any(
                u["name"] == wait.key and u["status"] == UpdateStatus.PENDING.value
                for u in t.updates.get(workflow_id, {}).values()
            )
        return False

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
        t = await self._begin()
        with t.lock:
            message = _next_message(t, lease.workflow_id, topic)
            if message is None:
                return None
            payload: str = message["payload"]
            call = BodyCall(lease, step_index, step_name, input, payload, path)
            at = now()
            self._record_call(t, call, f"receiving a message on {topic!r}", at)
            message["consumed_at"] = at
        return payload

    async def send(self, workflow_id: str, topic: str, payload: str, message_id: str) -> None:
        """Put a message in ``workflow_id``'s inbox (unless its id is there) and wake it if it
        waits on ``topic``."""
        _check_message(topic, message_id)
        t = await self._begin()
        with t.lock:
            self._deliver(t, workflow_id, topic, payload, message_id, now())

    async def send_from(
        self, call: BodyCall, workflow_id: str, topic: str, payload: str, message_id: str
    ) -> None:
        """:meth:`send` from a running body, fenced by ``call.lease``, ``call`` recorded."""
        _check_message(topic, message_id)
        what = f"sending to workflow {workflow_id} on {topic!r}"
        t = await self._begin()
        with t.lock:
            self._target(t, workflow_id)
            self._fence(t, call.lease, what)
            at = now()
            self._deliver(t, workflow_id, topic, payload, message_id, at)
            self._record_call(t, call, what, at)

    def _target(self, t: Tables, workflow_id: str) -> Row:
        row = t.workflows.get(workflow_id)
        if row is None:
            raise WorkflowNotFoundError(
                f"cannot send to workflow {workflow_id!r}: no such workflow in {self.description}"
            )
        return row

    def _deliver(
        self, t: Tables, workflow_id: str, topic: str, payload: str, message_id: str, at: datetime
    ) -> None:
        self._target(t, workflow_id)
        inbox = t.messages.setdefault(workflow_id, [])
        if any(m["message_id"] == message_id for m in inbox):
            return
        inbox.append(
            {
                "seq": t.next_seq(),
                "topic": topic,
                "message_id": message_id,
                "payload": payload,
                "sent_at": at,
                "consumed_at": None,
            }
        )
        self._wake(t, workflow_id, f"{WaitKind.MESSAGE.value}:{topic}", at)

    async def set_event(
        self, lease: Lease, key: str, value: str, *, call: BodyCall | None = None
    ) -> None:
        """Publish ``value`` under ``key`` for the workflow holding ``lease``; with ``call``,
        record it in the same transaction."""
        what = f"setting event {key!r}"
        t = await self._begin()
        with t.lock:
            self._fence(t, lease, what)
            at = now()
            if call is not None:
                self._record_call(t, call, what, at)
            t.events[(lease.workflow_id, key)] = {"value": value, "updated_at": at}

    async def get_event(self, workflow_id: str, key: str) -> str | None:
        """The value a workflow published under ``key``, or ``None``."""
        t = await self._begin()
        with t.lock:
            found = t.events.get((workflow_id, key))
        return None if found is None else str(found["value"])


def _runnable(row: Row, at: datetime, *, due_only: bool) -> bool:
    """``Statements.acquire_due`` / ``acquire_any``'s condition."""
    status = row["status"]
    if status == _RUNNING:  # expired: its worker is gone
        return row["locked_until"] is not None and row["locked_until"] < at
    if status not in (_PENDING, _WAITING):
        return False
    return not due_only or row["run_at"] <= at


def _next_message(t: Tables, workflow_id: str, topic: str) -> Row | None:
    for message in t.messages.get(workflow_id, ()):
        if message["topic"] == topic and message["consumed_at"] is None:
            return message
    return None


def attempt_history(
    t: Tables, lease: Lease, outcome: str, error: str | None, ended: datetime
) -> None:
    """The attempt's history row (``sql.rules.attempt_row``)."""
    t.attempts.append(
        {
            "seq": t.next_seq(),
            "workflow_id": lease.workflow_id,
            "attempt": lease.attempt,
            "worker": lease.worker_id,
            "started_at": lease.started_at,
            "ended_at": ended,
            "outcome": outcome,
            "error": error,
        }
    )


def _check_message(topic: str, message_id: str) -> None:
    check_topic(topic)
    for what, value, most in (("idempotency key", message_id, 64), ("topic", topic, MAX_TOPIC)):
        if len(value) > most:
            raise ConfigurationError(
                f"a message's {what} is at most {most} characters, got {len(value)}: {value[:80]!r}"
            )
