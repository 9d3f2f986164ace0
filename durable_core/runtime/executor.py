"""Running one attempt of one workflow instance to its settlement.

The executor is shared by the PostgreSQL worker and the in-process test
runner. Whatever the body does (returns, raises an exception or any
``BaseException``, is cancelled, suspends, loses its lease) ends in one decision
about how the attempt ended, and :mod:`~durable_core.runtime.settling` writes it: retried
with backoff while the attempt budget lasts, then ``failed`` with the error
recorded. A row is never left ``running`` by anything the body does; only a crash
leaves it so, and the lease expiry recovers it. Nothing a body does ends the
worker or touches another workflow.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import anyio

from ..codec import decode_arguments, encode
from ..definitions.registry import Registry, default_registry
from ..durations import utcnow
from ..errors import BodyRaisedError, FrameworkError, LeaseLostError
from ..seams.records import ClaimedWorkflow, WorkflowStatus
from . import settling
from .attempt import Attempt
from .compensation import Halt
from .config import WorkflowConfig
from .context import WorkflowContext
from .endings import Ending
from .group_commit import GroupCommit
from .leases import LeaseKeeper


class Executor:
    """Runs claimed workflows against a store and settles them."""

    def __init__(
        self,
        store: Any,
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

    async def run(
        self, claimed: ClaimedWorkflow, *, body_ended: Callable[[], None] | None = None
    ) -> WorkflowStatus | None:
        """Run one attempt of ``claimed``. Returns the status it settled with, or ``None``
        when the lease was lost (the new owner settles it). ``body_ended`` is called once
        its body has ended, before the attempt is settled (not when it never ran).

        An attempt that cannot be settled (the database stayed away for the whole
        lease) is logged and its error raised; its lease expires and it is reclaimed.
        """
        attempt = Attempt(self.store, self.config, claimed, self.clock, self.group)
        settling.claimed(attempt)
        self._running[claimed.id] = attempt
        try:
            return await self._run(attempt, body_ended)
        except LeaseLostError:  # refused while settling: the body had ended
            return await self._lease_lost(attempt)
        except Exception as exc:
            settling.unsettled(attempt, exc)
            raise
        finally:
            if self._running.get(claimed.id) is attempt:
                del self._running[claimed.id]
            if self.group is not None:
                self.group.forget(claimed.id)

    async def _run(
        self, attempt: Attempt, body_ended: Callable[[], None] | None
    ) -> WorkflowStatus | None:
        claimed = attempt.claimed
        if claimed.attempts > claimed.max_attempts:
            exhausted = FrameworkError(
                f"workflow {claimed.name} ({claimed.id}) was reclaimed after its lease expired, "
                f"but its attempt budget of {claimed.max_attempts} is spent"
            )
            return await settling.fail(attempt, exhausted, retryable=False)
        try:
            definition = self.registry.get(claimed.name)
            args, kwargs = decode_arguments(
                claimed.input, what=f"input of workflow {claimed.name} ({claimed.id})"
            )
        except FrameworkError as exc:
            return await settling.fail(attempt, exc, retryable=False)

        attempt.policy = definition.retry
        await settling.record_crash(attempt)
        if attempt.past_deadline():
            if not await attempt.owes_compensation():
                return await settling.timed_out(attempt)
            # Its compensations run first, past the deadline: its body replays to them.
            attempt.halt = Halt(settling.timeout_error(attempt), timed_out=True)
        await attempt.load_history()
        ctx = WorkflowContext.of(attempt)
        kwargs = definition.body_kwargs(kwargs, ctx.scheduled_at)
        left = attempt.seconds_left()
        if left is not None and attempt.halt is None:  # the body stops at the timeout
            attempt.body_scope.deadline = anyio.current_time() + left
        if self._keeper is not None:
            result, failure = await self._kept(self._keeper, ctx, definition.fn, args, kwargs)
        else:
            async with anyio.create_task_group() as own:
                keeper = LeaseKeeper()
                own.start_soon(keeper.run, self.config.heartbeat_interval)
                try:
                    result, failure = await self._kept(keeper, ctx, definition.fn, args, kwargs)
                finally:
                    own.cancel_scope.cancel()
        if body_ended is not None:
            body_ended()
        return await self._settle(attempt, result, failure)

    async def _settle(
        self, attempt: Attempt, result: Any, failure: BaseException | None
    ) -> WorkflowStatus | None:
        """Settle as the attempt ended: its ending when something decided one, else as
        its body returned or raised."""
        ending = attempt.ending
        if ending is None and attempt.halt is not None:
            ending = Ending.TIMED_OUT if attempt.halt.timed_out else Ending.CANCELLED
        if ending is None and attempt.body_scope.cancel_called and attempt.past_deadline():
            ending = Ending.TIMED_OUT
        if ending in (Ending.CANCELLED, Ending.TIMED_OUT) and attempt.owing and failure:
            return await settling.fail(attempt, failure)  # a compensation failed: retried
        if ending is Ending.SUSPENDED:
            return settling.waiting(attempt)
        if ending is Ending.TIMED_OUT:
            return await settling.timed_out(attempt)
        if ending is Ending.CANCELLED:
            return await settling.cancelled(attempt)
        if ending is Ending.LEASE_LOST or isinstance(failure, LeaseLostError):
            return await self._lease_lost(attempt)
        if failure is None:
            try:
                output = encode(result, what=f"output of workflow {attempt.claimed.name}")
            except FrameworkError as exc:
                failure = exc
            else:
                return await settling.succeed(attempt, output)
        return await settling.fail(attempt, failure)

    async def _lease_lost(self, attempt: Attempt) -> WorkflowStatus | None:
        """The lease is gone: because the timeout passed, because the workflow was
        cancelled (heard only through a refused write), or because another worker took it."""
        if attempt.ending is Ending.SUSPENDED:
            return settling.waiting(attempt)  # refused after the suspension (a `finally:`)
        if attempt.past_deadline():
            return await settling.timed_out(attempt)
        if attempt.ending is Ending.CANCELLED or await self._cancelled(attempt.claimed.id):
            return await settling.cancelled(attempt)
        settling.lost(attempt)
        return None

    async def _cancelled(self, workflow_id: str) -> bool:
        """Whether the lease was lost because the workflow was cancelled."""
        try:
            record = await self.store.get_workflow(workflow_id)
        except FrameworkError:
            return False
        return record is not None and record.status is WorkflowStatus.CANCELLED

    @staticmethod
    async def _kept(
        keeper: LeaseKeeper,
        ctx: WorkflowContext,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, BaseException | None]:
        """Run the body as the current workflow, its lease renewed by ``keeper`` until it
        ends: ``(result, None)`` or ``(None, what it raised)``. Only a cancellation of the
        worker itself goes through."""
        attempt = ctx.run
        token = ctx.activate()
        branch = attempt.journal.enter()
        keeper.keep(attempt)
        try:
            with attempt.body_scope:
                result = await fn(*args, **kwargs)
                attempt.journal.returned()
                return result, None
            # The body was stopped: by whatever decided the attempt's ending, or else by
            # the workflow's deadline (the scope's, on the monotonic clock).
            if attempt.ending is None and attempt.halt is None:
                attempt.ending = Ending.TIMED_OUT
            return None, None
        except Exception as exc:
            return None, exc
        except BaseException as exc:
            if (
                isinstance(exc, anyio.get_cancelled_exc_class())
                and anyio.current_effective_deadline() == -math.inf
            ):
                raise  # the worker itself is being cancelled
            return None, BodyRaisedError(
                f"workflow {ctx.workflow_name} ({ctx.workflow_id}) raised "
                f"{type(exc).__module__}.{type(exc).__qualname__}: {exc!r}"
            )
        finally:
            attempt.calls.closed = True
            keeper.release(attempt)
            attempt.journal.leave(branch)
            ctx.deactivate(token)
            await _stop_left_behind(attempt)


async def _stop_left_behind(attempt: Attempt) -> None:
    """Cancel the tasks the body left running (a member of ``asyncio.gather`` whose sibling
    failed, a task it never awaited) and wait for them to end: nothing of the body runs
    once the attempt settles."""
    tasks = list(attempt.journal.tasks())
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)
