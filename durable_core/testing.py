"""Running workflows in-process, with no worker and no claim: for unit tests.

Works on any store; the fastest is :class:`MemoryStore`, a store in this process's
memory (no database, no SQL) that plays every role of the seam::

    store = MemoryStore()
    runner = WorkflowRunner(store)
    handle = await DurableClient(store).start_workflow(checkout, 42)
    status = await runner.run_until_complete(handle)   # every attempt, skipping backoff

``run_once`` runs a single attempt (to completion, to its next retry or to
its next wait), so a test can observe the row between attempts.

Durable waits measure time by the runner's :class:`TestClock`, which the test
moves: ``runner.clock.advance(timedelta(days=3))``. ``run_until_complete``
skips time by itself when nothing can run before the next deadline, so a
workflow that sleeps three days completes at once (Temporal's time skipping).
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import anyio

from . import durations
from .caller.handle import WorkflowHandle
from .definitions.registry import Registry
from .durations import utcnow
from .errors import InvalidStateError
from .memory import MemoryStore
from .primitives.updates import update
from .runtime.config import WorkflowConfig
from .runtime.executor import Executor
from .seams.records import (
    WorkflowRecord,
    WorkflowStatus,
)
from .seams.roles import RUNNER_ROLES, require_roles
from .seams.store import Store

_PAGE = 1000
_CALLER_WAITS = ("message:", "update:")
"""What a workflow waiting for these waits on is the caller's to send (not the clock)."""
_YIELD_SECONDS = 0.01

T = TypeVar("T")


class TestClock:
    """Wall-clock time plus an offset the test grows with :meth:`advance`."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        """The current time, as the workflows run by this runner see it."""
        return utcnow() + self.offset

    def advance(self, by: float | timedelta) -> None:
        """Move the clock ``by`` seconds (or a timedelta) forward: it only moves forward,
        by at most :data:`~durable_core.durations.MAX_DURATION` at a time."""
        self.offset += durations.delta(by, "TestClock.advance by")

    def advance_to(self, moment: datetime) -> None:
        """Move the clock forward to ``moment`` (nothing if it is already past)."""
        self.offset += max(timedelta(0), moment - self.now())


class WorkflowRunner:
    """Runs enqueued workflows in the calling task through the real executor.

    Its store must play the roles of :data:`~durable_core.seams.roles.RUNNER_ROLES` (no
    claimer, no schedules): else :class:`~durable_core.errors.RoleNotSupportedError`."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig | None = None,
        *,
        registry: Registry | None = None,
        worker_id: str = "in-process",
        clock: TestClock | None = None,
    ) -> None:
        require_roles(store, RUNNER_ROLES, needed_by="WorkflowRunner")
        self.clock = clock or TestClock()
        self.executor = Executor(store, config, registry=registry, clock=self.clock.now)
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
        self, workflow: WorkflowHandle[Any] | str, *, max_runs: int = 1000
    ) -> WorkflowStatus:
        """Run the workflow, and whatever it waits on, until it reaches a terminal status.

        Backoff is skipped. While it waits, other runnable workflows (its children)
        run first; when nothing can run, the clock skips to the next deadline. A
        workflow waiting for a message nobody has sent raises
        :class:`~durable_core.errors.InvalidStateError`.
        """
        handle = (
            workflow
            if isinstance(workflow, WorkflowHandle)
            else WorkflowHandle(self.store, workflow)
        )
        record = await handle.info()
        runs = 0
        while not record.status.is_terminal:
            if runs >= max_runs:
                raise InvalidStateError(
                    f"workflow {handle.id} still {record.status.value} after {runs} runs"
                )
            runs += 1
            if record.status is not WorkflowStatus.WAITING:
                await self.run_once(handle)
            elif not await self.drain() and not await self._skip_time():
                raise InvalidStateError(
                    f"workflow {handle.id} waits for {record.waiting_for} and nothing "
                    "that can run will end the wait: send() the message first"
                )
            record = await handle.info()
        return record.status

    async def run_during(self, workflow: WorkflowHandle[Any] | str, call: Awaitable[T]) -> T:
        """Await ``call`` (an update, a ``get_event``, a caller's wait) while running the
        workflow, and what it waits on, the way a worker would; return ``call``'s result.

        The workflow runs whenever it can: a message or an update ``call`` sends wakes
        it, its children run, and a wait with a deadline (a ``sleep``, a retry's backoff)
        is skipped on the runner's clock. A wait for a message or an update is left to
        ``call`` to end. An error of ``call``'s is raised here. Once ``call`` is done the
        runner stops (the workflow may have gone on past what ``call`` waited for);
        ``run_until_complete`` runs the rest.
        """
        handle = self._handle(workflow)
        done = anyio.Event()
        outcome: list[T] = []
        failure: list[Exception] = []

        async def calling() -> None:
            try:
                outcome.append(await call)
            except Exception as exc:  # raised below, once the runner has stopped between runs
                failure.append(exc)
            finally:
                done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(calling)
            while not done.is_set():  # never cancelled in the middle of an attempt
                if not await self._run_alongside_once(handle):
                    with anyio.move_on_after(_YIELD_SECONDS):
                        await done.wait()  # the caller's turn (it may be polling)
        if failure:
            raise failure[0]
        return outcome[0]

    async def _run_alongside_once(self, handle: WorkflowHandle[Any]) -> bool:
        """Run ``handle``'s workflow, or what it waits on, once if it can; whether it did."""
        record = await handle.info()
        if record.status is WorkflowStatus.PENDING:
            await self.run_once(handle)
            return True
        if record.status is not WorkflowStatus.WAITING:
            return False
        if await self.drain():
            return True
        waits_for_caller = (record.waiting_for or "").startswith(_CALLER_WAITS)
        return not waits_for_caller and await self._skip_time()

    async def update(
        self,
        workflow: WorkflowHandle[Any] | str,
        name: str,
        payload: Any = None,
        *,
        update_id: str | None = None,
    ) -> Any:
        """Send the update ``name`` with ``payload`` and run the workflow until it answers;
        return the reply (see :meth:`run_during`). Raises what
        :meth:`~durable_core.DurableClient.update` raises:
        :class:`~durable_core.errors.UpdateRejectedError` when its validator refuses it,
        :class:`~durable_core.errors.UpdateNotHandledError` when the workflow ends first."""
        handle = self._handle(workflow)
        request = update(self.store, handle.id, name, payload, update_id=update_id)
        return await self.run_during(handle, request)

    def _handle(self, workflow: WorkflowHandle[Any] | str) -> WorkflowHandle[Any]:
        if isinstance(workflow, WorkflowHandle):
            return workflow
        return WorkflowHandle(self.store, workflow)

    async def _runnable(self, *, due_only: bool) -> list[WorkflowRecord]:
        now = self.clock.now()
        pending = await self.store.list_workflows(status=WorkflowStatus.PENDING, limit=_PAGE)
        waiting = await self.store.list_workflows(status=WorkflowStatus.WAITING, limit=_PAGE)
        woken = [r for r in waiting if r.wake_at is not None and r.wake_at <= now]
        due = [r for r in pending if not due_only or r.run_at <= now]
        return sorted(due + woken, key=lambda r: r.run_at)

    async def _skip_time(self) -> bool:
        """Move the clock to the earliest deadline of a waiting workflow, if there is one."""
        waiting = await self.store.list_workflows(status=WorkflowStatus.WAITING, limit=_PAGE)
        deadlines = [r.wake_at for r in waiting if r.wake_at is not None]
        if not deadlines:
            return False
        self.clock.advance_to(min(deadlines))
        return True

    async def drain(self, *, due_only: bool = True) -> int:
        """Run one attempt of every pending workflow, and of every waiting one whose deadline
        the clock has passed; return how many ran."""
        ran = 0
        for record in await self._runnable(due_only=due_only):
            claimed = await self.store.acquire(
                record.id,
                worker_id=self.worker_id,
                lease_seconds=self.executor.config.lock_timeout_secs,
                due_only=False,
            )
            if claimed is not None:
                await self.executor.run(claimed)
                ran += 1
        return ran


__all__ = ["MemoryStore", "TestClock", "WorkflowRunner"]
