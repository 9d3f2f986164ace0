"""The memory store's operator writes: retry, cancel (a request when sagas owe
compensations), fork, and erasing a settled workflow's payloads.

The rules are :mod:`durable_core.sql.store`'s, :mod:`durable_core.sql.compensation`'s and
:mod:`durable_core.sql.erasure`'s.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime

from ..codec.erasure import erased_error, tombstone
from ..codec.failures import cancellation_record, dump_error
from ..errors import InvalidStateError, WorkflowConflictError, WorkflowNotFoundError
from ..seams.records import Lease, NewWorkflow, StepStatus, WaitKind, WorkflowStatus
from ..sql.compensation import CANCEL_TOPIC, COMPENSATE, SAGA_END
from .attempts import AttemptOperations, attempt_history
from .tables import Row, Tables, now, release

RETRYABLE = (WorkflowStatus.FAILED.value, WorkflowStatus.CANCELLED.value)
CANCELLABLE = tuple(s.value for s in WorkflowStatus if not s.is_terminal)


class AdminOperations(AttemptOperations):
    """Retry, cancel, fork, compensations, erasure."""

    async def retry_workflow(self, workflow_id: str) -> None:
        """Put a failed or cancelled workflow back to pending with a fresh attempt budget."""
        t = await self._begin()
        with t.lock:
            if not self._retry(t, workflow_id, now()):
                raise self._refuse(
                    t, workflow_id, "only failed or cancelled workflows can be retried"
                )

    def _retry(self, t: Tables, workflow_id: str, at: datetime) -> bool:
        row = t.workflows.get(workflow_id)
        if row is None or row["status"] not in RETRYABLE:
            return False
        row.update(
            status=WorkflowStatus.PENDING.value,
            attempts=0,
            run_at=at,
            updated_at=at,
            completed_at=None,
        )
        return True

    async def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        """Cancel an unfinished workflow and its unfinished children (one owing a saga's
        compensations is asked to run them first); ``reason`` is the error recorded."""
        t = await self._begin()
        with t.lock:
            self._cancel(t, workflow_id, reason, None, now())

    def _cancel(
        self, t: Tables, workflow_id: str, reason: str | None, with_parent: str | None, at: datetime
    ) -> None:
        row = t.workflows.get(workflow_id)
        if reason is None:
            error = dump_error(cancellation_record(workflow_id, with_parent))
        else:
            error = reason
        if row is None or row["status"] not in CANCELLABLE:
            raise self._refuse(
                t, workflow_id, "only pending, running or waiting workflows can be cancelled"
            )
        if not self._request_cancel(t, row, error, at):
            row.update(
                status=WorkflowStatus.CANCELLED.value,
                error=error,
                completed_at=at,
                waiting_for=None,
            )
            release(row, at)
            for step in t.steps.get(workflow_id, {}).values():
                if step["status"] in (StepStatus.RUNNING.value, StepStatus.WAITING.value):
                    step.update(status=StepStatus.CANCELLED.value, completed_at=at)
            if row["parent_id"] is not None:
                self._wake(t, row["parent_id"], f"{WaitKind.CHILD.value}:{workflow_id}", at)
        children = [
            child["id"]
            for child in t.workflows.values()
            if child["parent_id"] == workflow_id and child["status"] in CANCELLABLE
        ]
        for child in children:
            with contextlib.suppress(InvalidStateError):
                self._cancel(t, child, reason, workflow_id, at)

    def _request_cancel(self, t: Tables, row: Row, error: str, at: datetime) -> bool:
        """Make the cancel a request when the workflow owes compensations
        (``sql.compensation``): a running row keeps its lease, an idle one is due now."""
        if not self._owes(t, row["id"]):
            return False
        if row["status"] == WorkflowStatus.RUNNING.value:
            row["updated_at"] = at
        else:
            row.update(
                status=WorkflowStatus.PENDING.value, run_at=at, waiting_for=None, updated_at=at
            )
        t.messages.setdefault(row["id"], []).append(
            {
                "seq": t.next_seq(),
                "topic": CANCEL_TOPIC,
                "message_id": f"{CANCEL_TOPIC}:{uuid.uuid4().hex}",
                "payload": error,
                "sent_at": at,
                "consumed_at": None,
            }
        )
        return True

    def _owes(self, t: Tables, workflow_id: str) -> bool:
        """A compensation recorded and its saga's end not (``sql.compensation.owes``)."""
        steps = t.steps.get(workflow_id, {}).values()
        ended = {s["input"] for s in steps if s["step_name"] == SAGA_END}
        return any(
            s["step_name"] == COMPENSATE
            and s["status"] == StepStatus.SUCCEEDED.value
            and s["input"] not in ended
            for s in steps
        )

    async def owes_compensation(self, workflow_id: str) -> bool:
        """Whether ``workflow_id`` has a saga with a compensation recorded and no end."""
        t = await self._begin()
        with t.lock:
            return self._owes(t, workflow_id)

    def _requested(self, t: Tables, workflow_id: str) -> Row | None:
        for message in t.messages.get(workflow_id, ()):
            if message["topic"] == CANCEL_TOPIC and message["consumed_at"] is None:
                return message
        return None

    async def cancel_requested(self, workflow_id: str) -> str | None:
        """The error JSON of a cancel requested of ``workflow_id`` and not yet settled."""
        t = await self._begin()
        with t.lock:
            found = self._requested(t, workflow_id)
        return None if found is None else str(found["payload"])

    async def settle_cancelled(
        self, lease: Lease, error: str | None, *, parent_id: str | None = None
    ) -> bool:
        """Settle the workflow of ``lease`` as cancelled when a cancel was requested of it,
        the request done, fenced by the lease; wake ``parent_id`` if it waits on it."""
        t = await self._begin()
        with t.lock:
            requested = self._requested(t, lease.workflow_id)
            if requested is None:
                return False
            row = self._fence(t, lease, "settling as cancelled")
            at = now()
            recorded = error if error is not None else requested["payload"]
            cancelled = WorkflowStatus.CANCELLED.value
            row.update(status=cancelled, output=None, error=recorded, completed_at=at)
            release(row, at)
            for message in t.messages.get(lease.workflow_id, ()):
                if message["topic"] == CANCEL_TOPIC and message["consumed_at"] is None:
                    message["consumed_at"] = at
            attempt_history(t, lease, cancelled, recorded, at)
            if parent_id is not None:
                self._wake(t, parent_id, f"{WaitKind.CHILD.value}:{lease.workflow_id}", at)
        return True

    async def fork_workflow(self, workflow: NewWorkflow, source_id: str, before_step: int) -> None:
        """Insert ``workflow`` with copies of ``source_id``'s succeeded steps below index
        ``before_step`` as its step cache, at once; an existing id conflicts."""
        t = await self._begin()
        with t.lock:
            if workflow.id in t.workflows:
                raise WorkflowConflictError(
                    f"cannot fork workflow {source_id} as {workflow.id!r}: that id is taken"
                )
            self._check_new(t, [workflow])
            self._insert(t, [workflow], now())
            copied = {
                index: dict(step)
                for index, step in t.steps.get(source_id, {}).items()
                if step["status"] == StepStatus.SUCCEEDED.value and index < before_step
            }
            if copied:
                t.steps[workflow.id] = copied

    # -- erasure -----------------------------------------------------------------------------

    async def erase_workflow(self, workflow_id: str) -> int:
        """Replace settled workflow ``workflow_id``'s payloads, and its descendants', with
        tombstones and delete their attributes, at once; how many rows were changed."""
        t = await self._begin()
        with t.lock:
            tree, frontier = [workflow_id], [workflow_id]
            while frontier:
                frontier = [
                    row["id"] for row in t.workflows.values() if row["parent_id"] in frontier
                ]
                tree += frontier
            for one in tree:
                row = t.workflows.get(one)
                if row is None:
                    raise WorkflowNotFoundError(
                        f"no workflow with id {one!r} in {self.description}"
                    )
                status = WorkflowStatus(row["status"])
                if not status.is_terminal:
                    whose = "" if one == workflow_id else f" (a descendant of {workflow_id})"
                    raise InvalidStateError(
                        f"workflow {one}{whose} is {status.value}: only a succeeded, failed or "
                        "cancelled workflow's payloads are erased (cancel it first)"
                    )
            at = datetime.now(UTC)
            return sum(_erase(t, one, at) for one in tree)


def _erase(t: Tables, workflow_id: str, at: datetime) -> int:
    """Erase one workflow's payloads (``sql.erasure``); the rows changed."""
    tomb = tombstone(at)

    def kept(value: str | None) -> str | None:
        return None if value is None else tomb

    row = t.workflows[workflow_id]
    row.update(input=tomb, output=kept(row["output"]), error=erased_error(row["error"], at))
    changed = 1
    steps = list(t.steps.get(workflow_id, {}).values())
    for step in steps:
        step.update(input=kept(step["input"]), output=kept(step["output"]))
    changed += len(steps)
    updates = list(t.updates.get(workflow_id, {}).values())
    keyed = [
        *steps,
        *t.step_tries.get(workflow_id, ()),
        *(a for a in t.attempts if a["workflow_id"] == workflow_id),
        *updates,
    ]
    for found in keyed:
        if found["error"] is not None:
            found["error"] = erased_error(found["error"], at)
            changed += 1
    for message in t.messages.get(workflow_id, ()):
        message["payload"] = kept(message["payload"])
        changed += 1
    for (owner, _), event in t.events.items():
        if owner == workflow_id:
            event["value"] = kept(event["value"])
            changed += 1
    for (owner, _), entries in t.streams.items():
        if owner == workflow_id:
            for entry in entries:
                entry["value"] = kept(entry["value"])
            changed += len(entries)
    for update in updates:
        update.update(payload=kept(update["payload"]), reply=kept(update["reply"]))
    changed += len(updates)
    changed += len(t.attributes.pop(workflow_id, {}))
    return changed
