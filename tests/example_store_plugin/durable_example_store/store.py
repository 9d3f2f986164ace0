"""``ExampleStore``: a store that delegates every operation to a ``SQLiteStore``.

It implements, by hand, only the roles it serves (``durable_core.seams.roles``):
lifecycle, caller, attempt, run and admin, what ``WorkflowRunner`` needs. It has
no ``claim`` (the worker refuses it at boot, as it must), hence no schedules:
nothing would fire them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from durable_core.errors import InvalidDatabaseURLError
from durable_core.seams.records import (
    AttemptRecord,
    BacklogRecord,
    BodyCall,
    ClaimedWorkflow,
    Lease,
    NewWorkflow,
    Settlement,
    StepRecord,
    StepTryRecord,
    Wait,
    WorkflowRecord,
    WorkflowStatus,
)
from durable_core.seams.roles import AdminStore, AttemptStore, CallerStore, Lifecycle, RunStore
from durable_sqlite import SQLiteStore

SCHEME = "example+sqlite:"


class ExampleStore(Lifecycle, CallerStore, AttemptStore, RunStore, AdminStore):
    """A durable-core store for ``example+sqlite:///path.db`` URLs: it plays the roles it
    derives from, and no other."""

    def __init__(self, url: str) -> None:
        if not url.startswith(SCHEME):
            raise InvalidDatabaseURLError(f"not an example store URL: {url!r}")
        self.path = url[len(SCHEME) :].removeprefix("///")
        self._inner = SQLiteStore("sqlite:" + url[len(SCHEME) :])

    @property
    def description(self) -> str:
        return f"example store at {self.path}"

    async def open(self) -> None:
        await self._inner.open()

    async def close(self) -> None:
        await self._inner.close()

    async def apply_schema(self) -> None:
        await self._inner.apply_schema()

    async def check_schema(self) -> None:
        await self._inner.check_schema()

    async def enqueue(self, workflows: Sequence[NewWorkflow]) -> Sequence[str]:
        return await self._inner.enqueue(workflows)

    async def get_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        return await self._inner.get_workflow(workflow_id)

    async def list_workflows(
        self,
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
    ) -> list[WorkflowRecord]:
        return await self._inner.list_workflows(
            status=status,
            name=name,
            limit=limit,
            queue=queue,
            parent_id=parent_id,
            created_after=created_after,
            created_before=created_before,
            before=before,
            error_type=error_type,
        )

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        return await self._inner.load_steps(workflow_id)

    async def load_step_tries(self, workflow_id: str) -> list[StepTryRecord]:
        return await self._inner.load_step_tries(workflow_id)

    async def backlog(self) -> list[BacklogRecord]:
        return await self._inner.backlog()

    async def retry_workflow(self, workflow_id: str) -> None:
        await self._inner.retry_workflow(workflow_id)

    async def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        await self._inner.cancel_workflow(workflow_id, reason)

    async def fork_workflow(self, workflow: NewWorkflow, source_id: str, before_step: int) -> None:
        await self._inner.fork_workflow(workflow, source_id, before_step)

    async def record_attempt(
        self, lease: Lease, outcome: str, error: str | None, ended_at: datetime | None = None
    ) -> None:
        await self._inner.record_attempt(lease, outcome, error, ended_at)

    async def load_attempts(self, workflow_id: str) -> list[AttemptRecord]:
        return await self._inner.load_attempts(workflow_id)

    async def acquire(
        self, workflow_id: str, *, worker_id: str, lease_seconds: float, due_only: bool = True
    ) -> ClaimedWorkflow | None:
        return await self._inner.acquire(
            workflow_id, worker_id=worker_id, lease_seconds=lease_seconds, due_only=due_only
        )

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        await self._inner.start_step(lease, step_index, step_name, input, path=path)

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        await self._inner.complete_step(lease, step_index, output)

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        await self._inner.fail_step(lease, step_index, error)

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        await self._inner.heartbeat(lease, lease_seconds)

    async def settle(self, settlement: Settlement) -> None:
        await self._inner.settle(settlement)

    # -- waiting (durable sleep, messages, events, children) ------------------

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
        await self._inner.record_step(lease, step_index, step_name, input, output, path=path)

    async def suspend(self, lease: Lease, waits: Sequence[Wait]) -> bool:
        return await self._inner.suspend(lease, waits)

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
        return await self._inner.receive(lease, topic, step_index, step_name, input, path=path)

    async def send(self, workflow_id: str, topic: str, payload: str, message_id: str) -> None:
        await self._inner.send(workflow_id, topic, payload, message_id)

    async def set_event(
        self, lease: Lease, key: str, value: str, *, call: BodyCall | None = None
    ) -> None:
        await self._inner.set_event(lease, key, value, call=call)

    # -- a body's effects, fenced by its lease ---------------------------------

    async def send_from(
        self, call: BodyCall, workflow_id: str, topic: str, payload: str, message_id: str
    ) -> None:
        await self._inner.send_from(call, workflow_id, topic, payload, message_id)

    async def enqueue_from(self, call: BodyCall, workflows: Sequence[NewWorkflow]) -> Sequence[str]:
        return await self._inner.enqueue_from(call, workflows)

    async def get_event(self, workflow_id: str, key: str) -> str | None:
        return await self._inner.get_event(workflow_id, key)
