"""Running workflows in-process, with no worker and no claim: for unit tests.

Works on any store, SQLite included::

    runner = WorkflowRunner(store)
    handle = await client.start_workflow(checkout, 42)
    status = await runner.run_until_complete(handle)   # every attempt, skipping backoff

``run_once`` runs a single attempt (to completion or to its next retry), so a
test can observe the row between attempts.
"""

from __future__ import annotations

from typing import Any

from .config import WorkflowConfig
from .errors import InvalidStateError
from .executor import Executor
from .handle import WorkflowHandle
from .records import WorkflowStatus
from .registry import Registry
from .store import Store

_PAGE = 1000


class WorkflowRunner:
    """Runs enqueued workflows in the calling task through the real executor."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig | None = None,
        *,
        registry: Registry | None = None,
        worker_id: str = "in-process",
    ) -> None:
        self.executor = Executor(store, config, registry=registry)
        self.store = store
        self.worker_id = worker_id

    async def run_once(
        self, workflow: WorkflowHandle[Any] | str, *, due_only: bool = False
    ) -> WorkflowStatus:
        """Run one attempt of a workflow; return its status afterwards.

        With ``due_only=False`` (the default) a retry waiting out its backoff runs now.
        """
        workflow_id = workflow if isinstance(workflow, str) else workflow.id
        claimed = await self.store.acquire(
            workflow_id,
            worker_id=self.worker_id,
            lease_seconds=self.executor.config.lock_timeout_secs,
            due_only=due_only,
        )
        if claimed is None:
            record = await WorkflowHandle(self.store, workflow_id).info()
            raise InvalidStateError(
                f"workflow {workflow_id} is {record.status.value} and cannot run now"
            )
        await self.executor.run(claimed)
        return await WorkflowHandle(self.store, workflow_id).status()

    async def run_until_complete(
        self, workflow: WorkflowHandle[Any] | str, *, max_runs: int = 100
    ) -> WorkflowStatus:
        """Run attempts, skipping backoff, until the workflow reaches a terminal status."""
        handle = (
            workflow
            if isinstance(workflow, WorkflowHandle)
            else WorkflowHandle(self.store, workflow)
        )
        status = await handle.status()
        runs = 0
        while not status.is_terminal:
            if runs >= max_runs:
                raise InvalidStateError(
                    f"workflow {handle.id} still {status.value} after {runs} runs"
                )
            status = await self.run_once(handle)
            runs += 1
        return status

    async def drain(self, *, due_only: bool = True) -> int:
        """Run one attempt of every pending workflow; return how many ran."""
        ran = 0
        pending = await self.store.list_workflows(status=WorkflowStatus.PENDING, limit=_PAGE)
        for record in sorted(pending, key=lambda r: r.run_at):
            claimed = await self.store.acquire(
                record.id,
                worker_id=self.worker_id,
                lease_seconds=self.executor.config.lock_timeout_secs,
                due_only=due_only,
            )
            if claimed is not None:
                await self.executor.run(claimed)
                ran += 1
        return ran
