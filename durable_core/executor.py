"""Running one attempt of one workflow instance to its settlement.

The executor is shared by the PostgreSQL worker and the in-process test
runner. Whatever escapes the body (a returned failure, a bug, a determinism
error) is caught and settled by the :class:`~durable_core.attempt.Attempt`:
retried with linear backoff while the attempt budget lasts, then ``failed``
with the error recorded. A row is never left ``running`` by an exception;
only a crash leaves it so, and the lease expiry recovers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import anyio

from .attempt import Attempt
from .coltypes import utcnow
from .config import WorkflowConfig
from .context import WorkflowContext
from .errors import FrameworkError, LeaseLostError
from .group_commit import GroupCommit
from .journal import Suspended
from .leases import LeaseKeeper
from .records import ClaimedWorkflow, WorkflowStatus
from .registry import Registry, default_registry
from .serialization import decode_arguments, encode
from .store import Store


class Executor:
    """Runs claimed workflows against a store and settles them."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig | None = None,
        *,
        registry: Registry | None = None,
        clock: Callable[[], datetime] = utcnow,
        group: GroupCommit | None = None,
    ) -> None:
        self.store = store
        self.group = group
        """Commits the step rows and settlements of concurrent attempts together, if set."""
        self.config = config or WorkflowConfig()
        self.registry = registry or default_registry
        self.clock = clock
        self._keeper: LeaseKeeper | None = None
        self._running: dict[str, Attempt] = {}

    def cancel(self, workflow_id: str) -> None:
        """Stop the body of ``workflow_id`` at once if this executor runs it (it was cancelled)."""
        attempt = self._running.get(workflow_id)
        if attempt is not None:
            attempt.cancel()

    async def keep_leases(self) -> None:
        """Renew the lease of every attempt this executor runs, from this one task, until
        cancelled. The worker runs it beside its workflows; without it (the in-process
        runner) each attempt runs a keeper of its own."""
        keeper = LeaseKeeper()
        self._keeper = keeper
        try:
            await keeper.run(self.config.heartbeat_interval)
        finally:
            if self._keeper is keeper:
                self._keeper = None

    async def run(self, claimed: ClaimedWorkflow) -> WorkflowStatus | None:
        """Run one attempt of ``claimed``. Returns the status it settled with, or ``None``
        when the lease was lost (the new owner settles it).

        An attempt that cannot be settled (the database stayed away for the whole
        lease) is logged and its error raised; its lease expires and it is reclaimed.
        """
        attempt = Attempt(self.store, self.config, claimed, self.clock, self.group)
        attempt.claimed_event(claimed.name)
        self._running[claimed.id] = attempt
        try:
            return await self._run(attempt)
        except LeaseLostError:
            if attempt.suspended is not None:
                return attempt.waiting()  # a write after the suspension (a `finally:`)
            if attempt.past_deadline():
                return await attempt.time_out()
            if attempt.cancelled or await self._cancelled(claimed.id):
                return await attempt.was_cancelled()
            attempt.lost()
            return None
        except Exception as exc:
            attempt.unsettled(exc)
            raise
        finally:
            if self._running.get(claimed.id) is attempt:
                del self._running[claimed.id]
            if self.group is not None:
                self.group.forget(claimed.id)

    async def _cancelled(self, workflow_id: str) -> bool:
        """Whether the lease was lost because the workflow was cancelled."""
        try:
            record = await self.store.get_workflow(workflow_id)
        except FrameworkError:
            return False
        return record is not None and record.status is WorkflowStatus.CANCELLED

    async def _run(self, attempt: Attempt) -> WorkflowStatus:
        claimed = attempt.claimed
        if claimed.attempts > claimed.max_attempts:
            exhausted = FrameworkError(
                f"workflow {claimed.name} ({claimed.id}) was reclaimed after its lease expired, "
                f"but its attempt budget of {claimed.max_attempts} is spent"
            )
            return await attempt.fail(exhausted, retryable=False)
        try:
            definition = self.registry.get(claimed.name)
            args, kwargs = decode_arguments(
                claimed.input, what=f"input of workflow {claimed.name} ({claimed.id})"
            )
        except FrameworkError as exc:
            return await attempt.fail(exc, retryable=False)

        attempt.policy = definition.retry
        await attempt.record_crash()
        if attempt.past_deadline():
            return await attempt.time_out()
        await attempt.load_history()
        ctx = WorkflowContext(
            workflow_id=claimed.id,
            workflow_name=claimed.name,
            attempt=claimed.attempts,
            max_attempts=claimed.max_attempts,
            worker_id=claimed.lease.worker_id,
            run=attempt,
        )
        body = definition.fn
        left = attempt.seconds_left()
        if left is not None:  # the body stops when the workflow's timeout passes
            attempt.body_scope.deadline = anyio.current_time() + left
        if self._keeper is not None:
            result, failure = await self._kept(self._keeper, ctx, body, args, kwargs)
        else:
            async with anyio.create_task_group() as own:
                keeper = LeaseKeeper()
                own.start_soon(keeper.run, self.config.heartbeat_interval)
                try:
                    result, failure = await self._kept(keeper, ctx, body, args, kwargs)
                finally:
                    own.cancel_scope.cancel()

        if attempt.suspended is not None:
            return attempt.waiting()
        if attempt.body_scope.cancelled_caught and attempt.past_deadline():
            return await attempt.time_out()
        if attempt.cancelled:
            return await attempt.was_cancelled()
        if attempt.lease_lost or isinstance(failure, LeaseLostError):
            raise LeaseLostError(f"lease lost on workflow {claimed.id}")
        if failure is None:
            try:
                output = encode(result, what=f"output of workflow {claimed.name}")
            except FrameworkError as exc:
                failure = exc
            else:
                return await attempt.succeed(output)
        return await attempt.fail(failure)

    @staticmethod
    async def _kept(
        keeper: LeaseKeeper,
        ctx: WorkflowContext,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, Exception | None]:
        """Run the body as the current workflow, its lease renewed by ``keeper`` until it
        ends: ``(result, None)`` or ``(None, exception)``."""
        attempt = ctx.run
        token = ctx.activate()
        keeper.keep(attempt)
        try:
            with attempt.body_scope:
                return await fn(*args, **kwargs), None
            return None, None  # cancelled because the lease was lost
        except Suspended:
            return None, None  # attempt.suspended says on what
        except Exception as exc:
            return None, exc
        finally:
            keeper.release(attempt)
            ctx.deactivate(token)
