"""Running one attempt of one workflow instance and settling its row.

The executor is shared by the PostgreSQL worker and the in-process test
runner. Whatever escapes the body (a returned failure, a bug, a determinism
error) is caught and settled: retried with linear backoff while the attempt
budget lasts, then ``failed`` with the error recorded. A row is never left
``running`` by an exception; only a crash leaves it so, and the lease expiry
recovers it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from . import hooks
from .config import WorkflowConfig
from .context import WorkflowContext
from .errors import (
    FrameworkError,
    LeaseLostError,
    StoreUnavailableError,
)
from .failures import dump_error, error_record
from .records import ClaimedWorkflow, WorkflowStatus
from .registry import Registry, default_registry
from .serialization import decode_arguments, encode
from .store import Store

logger = logging.getLogger("durable_core.worker")

T = TypeVar("T")

_MAX_STORE_BACKOFF = 2.0


class _Attempt:
    """The mutable state of one attempt: lease deadline, lease loss, the body's scope."""

    def __init__(self, executor: Executor, claimed: ClaimedWorkflow) -> None:
        self.executor = executor
        self.claimed = claimed
        self.lease_deadline = time.monotonic() + executor.config.lock_timeout_secs
        self.renew_at = anyio.current_time() + executor.config.heartbeat_interval
        self.lease_lost = False
        self.body_scope = anyio.CancelScope()
        self.fields: dict[str, Any] = {
            "worker_id": claimed.lease.worker_id,
            "workflow_id": claimed.id,
            "attempts": claimed.attempts,
            "max_attempts": claimed.max_attempts,
        }

    async def persist(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run a store write, retrying while the database is unreachable and the lease lasts."""
        delay = 0.05
        while True:
            if self.lease_lost:
                raise LeaseLostError(
                    f"worker {self.claimed.lease.worker_id} lost the lease on workflow "
                    f"{self.claimed.id}"
                )
            try:
                return await operation()
            except StoreUnavailableError as exc:
                if time.monotonic() + delay >= self.lease_deadline:
                    raise
                logger.warning(
                    "store unavailable, retrying in %.2fs: %s", delay, exc, extra=self.fields
                )
                await anyio.sleep(delay)
                delay = min(delay * 2, _MAX_STORE_BACKOFF)

    async def renew(self, keeper: _LeaseKeeper) -> None:
        """Renew the lease once (the keeper calls this at half the lock timeout); on lease
        loss, cancel the body; then schedule the next renewal."""
        config = self.executor.config
        try:
            await self.executor.store.heartbeat(self.claimed.lease, config.lock_timeout_secs)
        except LeaseLostError:
            if self in keeper.attempts:
                self.lease_lost = True
                self.body_scope.cancel()
            return
        except StoreUnavailableError as exc:
            logger.warning("lease renewal failed, will retry: %s", exc, extra=self.fields)
        except Exception:
            logger.exception("lease renewal failed, will retry", extra=self.fields)
        else:
            self.lease_deadline = time.monotonic() + config.lock_timeout_secs
        self.renew_at = anyio.current_time() + config.heartbeat_interval


class _LeaseKeeper:
    """Renews the lease of every attempt in flight from one task.

    Each lease is renewed at half the lock timeout after its attempt began and after
    each renewal, without a task and a cancelled scope per attempt. An attempt leaves
    the keeper when its body ends, however it ends; a renewal still in flight then
    changes nothing.
    """

    def __init__(self) -> None:
        self.attempts: set[_Attempt] = set()

    async def run(self, interval: float) -> None:
        # Sleeping at most ``interval`` means every attempt added meanwhile is due
        # after the next wake-up, so adding one never needs to wake this task.
        async with anyio.create_task_group() as renewals:
            while True:
                now = anyio.current_time()
                wake = now + interval
                for attempt in list(self.attempts):
                    if attempt.renew_at <= now:
                        attempt.renew_at = math.inf  # one renewal at a time
                        renewals.start_soon(attempt.renew, self)
                    elif attempt.renew_at < wake:
                        wake = attempt.renew_at
                await anyio.sleep(wake - now)


class Executor:
    """Runs claimed workflows against a store and settles them."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig | None = None,
        *,
        registry: Registry | None = None,
    ) -> None:
        self.store = store
        self.config = config or WorkflowConfig()
        self.registry = registry or default_registry
        self._keeper: _LeaseKeeper | None = None

    async def keep_leases(self) -> None:
        """Renew the lease of every attempt this executor runs, from this one task, until
        cancelled. The worker runs it beside its workflows; without it (the in-process
        runner) each attempt runs a keeper of its own."""
        keeper = _LeaseKeeper()
        self._keeper = keeper
        try:
            await keeper.run(self.config.heartbeat_interval)
        finally:
            if self._keeper is keeper:
                self._keeper = None

    async def run(self, claimed: ClaimedWorkflow) -> WorkflowStatus | None:
        """Run one attempt of ``claimed``. Returns the status it settled with, or ``None``
        when the lease was lost (the new owner settles it)."""
        attempt = _Attempt(self, claimed)
        hooks.notify("durable_workflow_claimed", workflow_name=claimed.name, **attempt.fields)
        try:
            return await self._run(attempt)
        except LeaseLostError:
            self._lease_lost(attempt)
            return None

    async def _run(self, attempt: _Attempt) -> WorkflowStatus:
        claimed = attempt.claimed
        if claimed.attempts > claimed.max_attempts:
            exhausted = FrameworkError(
                f"workflow {claimed.name} ({claimed.id}) was reclaimed after its lease expired, "
                f"but its attempt budget of {claimed.max_attempts} is spent"
            )
            return await self._settle_failure(attempt, exhausted, retryable=False)
        try:
            definition = self.registry.get(claimed.name)
            args, kwargs = decode_arguments(
                claimed.input, what=f"input of workflow {claimed.name} ({claimed.id})"
            )
        except FrameworkError as exc:
            return await self._settle_failure(attempt, exc, retryable=False)

        steps = claimed.steps
        if steps is None:
            steps = tuple(await attempt.persist(lambda: self.store.load_steps(claimed.id)))
        ctx = WorkflowContext(
            workflow_id=claimed.id,
            workflow_name=claimed.name,
            attempt=claimed.attempts,
            max_attempts=claimed.max_attempts,
            worker_id=claimed.lease.worker_id,
            store=self.store,
            lease=claimed.lease,
            steps={step.step_index: step for step in steps},
            persist=attempt.persist,
        )

        body = definition.fn
        if self._keeper is not None:
            result, failure = await self._kept(self._keeper, attempt, ctx, body, args, kwargs)
        else:
            async with anyio.create_task_group() as own:
                keeper = _LeaseKeeper()
                own.start_soon(keeper.run, self.config.heartbeat_interval)
                try:
                    result, failure = await self._kept(keeper, attempt, ctx, body, args, kwargs)
                finally:
                    own.cancel_scope.cancel()

        if attempt.lease_lost or isinstance(failure, LeaseLostError):
            raise LeaseLostError(f"lease lost on workflow {claimed.id}")
        if failure is None:
            try:
                output = encode(result, what=f"output of workflow {claimed.name}")
            except FrameworkError as exc:
                failure = exc
            else:
                return await self._settle_success(attempt, output)
        step = ctx.failed_step
        return await self._settle_failure(attempt, failure, step=step)

    @staticmethod
    async def _kept(
        keeper: _LeaseKeeper,
        attempt: _Attempt,
        ctx: WorkflowContext,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, Exception | None]:
        """Run the body as the current workflow, its lease renewed by ``keeper`` until it
        ends: ``(result, None)`` or ``(None, exception)``."""
        token = ctx.activate()
        keeper.attempts.add(attempt)
        try:
            with attempt.body_scope:
                return await fn(*args, **kwargs), None
            return None, None  # cancelled because the lease was lost
        except Exception as exc:
            return None, exc
        finally:
            keeper.attempts.discard(attempt)
            ctx.deactivate(token)

    async def _settle_success(self, attempt: _Attempt, output: str) -> WorkflowStatus:
        lease = attempt.claimed.lease
        await attempt.persist(
            lambda: self.store.settle(lease, WorkflowStatus.SUCCEEDED, output=output)
        )
        logger.info(
            "workflow %s succeeded",
            attempt.claimed.name,
            extra={**attempt.fields, "outcome": "succeeded"},
        )
        hooks.notify("durable_workflow_succeeded", output=output, **attempt.fields)
        return WorkflowStatus.SUCCEEDED

    async def _settle_failure(
        self,
        attempt: _Attempt,
        exc: BaseException,
        *,
        retryable: bool | None = None,
        step: tuple[int, str] | None = None,
    ) -> WorkflowStatus:
        claimed = attempt.claimed
        lease = claimed.lease
        if retryable is None:
            retryable = not isinstance(exc, FrameworkError) or exc.retryable
        record = error_record(
            exc,
            step_index=step[0] if step else None,
            step_name=step[1] if step else None,
        )
        error = dump_error(record)
        if retryable and claimed.attempts < claimed.max_attempts:
            delay = self.config.retry_delay(claimed.attempts)
            await attempt.persist(
                lambda: self.store.settle(
                    lease, WorkflowStatus.PENDING, error=error, retry_delay_seconds=delay
                )
            )
            logger.warning(
                "workflow %s attempt %d/%d failed (%s: %s); retrying in %.1fs",
                claimed.name,
                claimed.attempts,
                claimed.max_attempts,
                record["type"],
                exc,
                delay,
                extra={**attempt.fields, "outcome": "retry", "error_type": record["type"]},
            )
            hooks.notify(
                "durable_retry_scheduled", error=record, delay_seconds=delay, **attempt.fields
            )
            return WorkflowStatus.PENDING
        await attempt.persist(lambda: self.store.settle(lease, WorkflowStatus.FAILED, error=error))
        logger.error(
            "workflow %s failed on attempt %d/%d (%s: %s)",
            claimed.name,
            claimed.attempts,
            claimed.max_attempts,
            record["type"],
            exc,
            extra={**attempt.fields, "outcome": "failed", "error_type": record["type"]},
        )
        hooks.notify("durable_workflow_failed", error=record, **attempt.fields)
        return WorkflowStatus.FAILED

    def _lease_lost(self, attempt: _Attempt) -> None:
        logger.warning(
            "lost the lease on workflow %s; another worker owns it now",
            attempt.claimed.id,
            extra={**attempt.fields, "outcome": "lease_lost"},
        )
        hooks.notify("durable_lease_lost", **attempt.fields)
