"""``Attempt``: the one owner of everything an attempt of a workflow writes.

Its lease (renewals, fencing, loss), its step rows, its settlement, its log
fields and the observer events they fire all go through the attempt. Steps
reach it through the running :class:`~durable_core.context.WorkflowContext`;
the executor creates it and settles through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

import anyio

from .coltypes import utcnow
from .config import WorkflowConfig
from .errors import (
    FrameworkError,
    InvalidStateError,
    LeaseLostError,
    StoreUnavailableError,
    WorkflowTimeoutError,
)
from .failures import dump_error, error_record
from .hooks import observers
from .records import ClaimedWorkflow, StepRecord, StepStatus, Wait, WorkflowStatus
from .retry import RetryPolicy
from .store import StepWriter, Store


class Keeper(Protocol):
    """What renews an attempt's lease (a :class:`~durable_core.leases.LeaseKeeper`)."""

    def keeps(self, attempt: Attempt) -> bool:
        """Whether ``attempt``'s lease is still renewed there."""
        ...


logger = logging.getLogger("durable_core.worker")

T = TypeVar("T")

_MAX_STORE_BACKOFF = 2.0


class Attempt:
    """One attempt of one claimed workflow, from its claim to its settlement."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig,
        claimed: ClaimedWorkflow,
        clock: Callable[[], datetime] = utcnow,
        writes: StepWriter | None = None,
    ) -> None:
        self.store = store
        self.writes = store if writes is None else writes
        """What the step rows and the settlement go through (the store, or a group commit)."""
        self.config = config
        self.claimed = claimed
        self.clock = clock
        """The time durable waits measure deadlines by (a test's clock in the runner)."""
        self.lease = claimed.lease
        self.fields: dict[str, Any] = {
            "worker_id": claimed.lease.worker_id,
            "workflow_id": claimed.id,
            "attempts": claimed.attempts,
            "max_attempts": claimed.max_attempts,
        }
        """What every log record and observer event of this attempt carries."""
        self.steps: dict[int, StepRecord] = {}
        self.failed_step: tuple[int, str] | None = None
        """The step the attempt failed in, recorded with its error."""
        self.lease_deadline = time.monotonic() + config.lock_timeout_secs
        self.renew_at = anyio.current_time() + config.heartbeat_interval
        self.lease_lost = False
        self.suspended: Wait | None = None
        """What the attempt suspended on, once it has."""
        self.policy: RetryPolicy | None = None
        """The workflow's retry policy (``None``: linear backoff, the configured budget)."""
        self.cancelled = False
        """The workflow was cancelled while this attempt ran it."""
        self.given_up: list[BaseException] = []
        """Errors a step's retry policy gave up on: if one fails the body, no attempt follows."""
        self.body_scope = anyio.CancelScope()
        self.patches: dict[str, bool] = {}
        """Each patch id's answer in this attempt (see :mod:`durable_core.patching`)."""
        self._next_index = 0

    # -- the history --------------------------------------------------------------------------

    async def load_history(self) -> None:
        """Read the cached steps (unless the claim brought them along)."""
        steps = self.claimed.steps
        if steps is None:
            workflow_id = self.claimed.id
            steps = tuple(await self.persist(lambda: self.store.load_steps(workflow_id)))
        self.steps = {step.step_index: step for step in steps}

    def next_step_index(self) -> int:
        """Assign the next step index; indexes follow the order of step calls."""
        index = self._next_index
        self._next_index += 1
        return index

    def peek_step_index(self) -> int:
        """The index the next step call will take."""
        return self._next_index

    # -- steps --------------------------------------------------------------------------------

    def _step_fields(self, index: int, name: str) -> dict[str, Any]:
        return {**self.fields, "step_index": index, "step_name": name}

    def step_replayed(self, index: int, name: str) -> None:
        """A step returned its cached output without running."""
        observers().durable_step_succeeded(cached=True, **self._step_fields(index, name))

    def replay_broken(self, index: int, name: str) -> None:
        """Replaying the step at ``index`` broke the determinism contract or met a corrupt cache."""
        self.failed_step = (index, name)

    async def step_started(self, index: int, name: str, input_json: str, tries: int = 1) -> None:
        """Record that a step's body is about to run with this input, for try ``tries``."""
        await self.persist(lambda: self.writes.start_step(self.lease, index, name, input_json))
        observers().durable_step_started(step_attempt=tries, **self._step_fields(index, name))

    async def step_failed(self, index: int, name: str, exc: Exception) -> None:
        """Record that a step's body raised ``exc``."""
        self.failed_step = (index, name)
        error = dump_error(error_record(exc, step_index=index, step_name=name))
        await self.persist(lambda: self.writes.fail_step(self.lease, index, error))
        observers().durable_step_failed(error=exc, **self._step_fields(index, name))

    def give_up(self, exc: BaseException) -> None:
        """A step's retry policy will not retry ``exc``: if it fails the body, nor will the
        workflow's (a body that catches it goes on as usual)."""
        self.given_up.append(exc)

    async def step_succeeded(self, index: int, name: str, input_json: str, output: str) -> None:
        """Record a step's output; a later replay in this attempt returns it from the cache."""
        self.failed_step = None  # a step retried to success is no longer the one that failed
        await self.persist(lambda: self.writes.complete_step(self.lease, index, output))
        self.steps[index] = StepRecord(index, name, StepStatus.SUCCEEDED, input_json, output)
        observers().durable_step_succeeded(cached=False, **self._step_fields(index, name))

    # -- durable primitives -------------------------------------------------------------------

    async def record(self, index: int, name: str, input_json: str, output: str) -> None:
        """Record a durable primitive's result (a send, a start, a wait that is over)."""
        await self.persist(
            lambda: self.writes.record_step(self.lease, index, name, input_json, output)
        )
        self.steps[index] = StepRecord(index, name, StepStatus.SUCCEEDED, input_json, output)
        observers().durable_step_succeeded(cached=False, **self._step_fields(index, name))

    async def receive(self, topic: str, index: int, name: str, input_json: str) -> str | None:
        """Take the next message on ``topic`` as the output of step ``index``, if there is one."""
        payload = await self.persist(
            lambda: self.writes.receive(self.lease, topic, index, name, input_json)
        )
        if payload is not None:
            self.steps[index] = StepRecord(index, name, StepStatus.SUCCEEDED, input_json, payload)
            observers().durable_step_succeeded(cached=False, **self._step_fields(index, name))
        return payload

    async def suspend(self, wait: Wait, output: str) -> bool:
        """Leave the workflow waiting on ``wait``; ``False`` when the wait is already over.

        The workflow's own deadline, when sooner, ends the wait too (and the workflow).
        """
        deadline = self.claimed.deadline
        if deadline is not None and (wait.deadline is None or deadline < wait.deadline):
            wait = dataclasses.replace(wait, deadline=deadline)
        waits = [dataclasses.replace(wait, step_output=output)]
        if await self.persist(lambda: self.writes.suspend(self.lease, waits)):
            self.suspended = wait
            return True
        return False

    async def set_event(self, key: str, value: str) -> None:
        """Publish ``value`` under ``key`` for this workflow."""
        await self.persist(lambda: self.writes.set_event(self.lease, key, value))

    def waiting(self) -> WorkflowStatus:
        """The attempt ended suspended: the row waits, holding no lease and no slot."""
        wait = self.suspended
        assert wait is not None
        logger.info(
            "workflow %s waiting for %s",
            self.claimed.name,
            wait.waiting_for,
            extra={**self.fields, "outcome": "waiting"},
        )
        observers().durable_workflow_waiting(
            waiting_for=wait.waiting_for, wake_at=wait.deadline, **self.fields
        )
        return WorkflowStatus.WAITING

    # -- the lease ----------------------------------------------------------------------------

    async def persist(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run a store write, retrying while the database is unreachable and the lease lasts."""
        delay = 0.05
        while True:
            if self.lease_lost:
                raise LeaseLostError(
                    f"worker {self.lease.worker_id} lost the lease on workflow {self.claimed.id}"
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

    async def renew(self, keeper: Keeper) -> None:
        """Renew the lease once; on its loss, cancel the body. Then schedule the next renewal."""
        config = self.config
        try:
            await self.store.heartbeat(self.lease, config.lock_timeout_secs)
        except LeaseLostError:
            if keeper.keeps(self):
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

    # -- settling -----------------------------------------------------------------------------

    def claimed_event(self, workflow_name: str) -> None:
        """The attempt began: the worker holds the lease and is about to run the body."""
        claimed, queue_wait = self.claimed, None
        if claimed.crashed is None and claimed.due_at is not None:
            taken = claimed.lease.started_at or self.clock()
            queue_wait = max(0.0, (taken - claimed.due_at).total_seconds())
        observers().durable_workflow_claimed(
            workflow_name=workflow_name,
            queue_wait=queue_wait,
            headers=claimed.headers or {},
            **self.fields,
        )

    async def succeed(self, output: str) -> WorkflowStatus:
        """Settle as succeeded with this output JSON."""
        await self.persist(
            lambda: self.writes.settle(
                self.lease,
                WorkflowStatus.SUCCEEDED,
                output=output,
                parent_id=self.claimed.parent_id,
            )
        )
        logger.info(
            "workflow %s succeeded",
            self.claimed.name,
            extra={**self.fields, "outcome": "succeeded"},
        )
        observers().durable_workflow_succeeded(output=output, **self.fields)
        return WorkflowStatus.SUCCEEDED

    async def fail(self, exc: BaseException, *, retryable: bool | None = None) -> WorkflowStatus:
        """Settle a failed attempt: pending again after the backoff while the budget lasts
        (and the error can be retried), else failed."""
        claimed, policy = self.claimed, self.policy
        if retryable is None:
            if any(exc is given for given in self.given_up):
                retryable = False
            elif policy is not None:
                retryable = policy.retries(exc)
            else:
                retryable = not isinstance(exc, FrameworkError) or exc.retryable
        index, name = self.failed_step or (None, None)
        record = error_record(exc, step_index=index, step_name=name)
        error = dump_error(record)
        if retryable and claimed.attempts < claimed.max_attempts:
            delay = (
                policy.delay(claimed.attempts)
                if policy is not None
                else self.config.retry_delay(claimed.attempts)
            )
            if claimed.deadline is not None:  # the retry is due by the deadline at the latest
                left = (claimed.deadline - self.clock()).total_seconds()
                delay = max(0.0, min(delay, left))
            await self.persist(
                lambda: self.writes.settle(
                    self.lease, WorkflowStatus.PENDING, error=error, retry_delay_seconds=delay
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
                extra={**self.fields, "outcome": "retry", "error_type": record["type"]},
            )
            observers().durable_retry_scheduled(error=record, delay_seconds=delay, **self.fields)
            return WorkflowStatus.PENDING
        await self.persist(
            lambda: self.writes.settle(
                self.lease, WorkflowStatus.FAILED, error=error, parent_id=self.claimed.parent_id
            )
        )
        logger.error(
            "workflow %s failed on attempt %d/%d (%s: %s)",
            claimed.name,
            claimed.attempts,
            claimed.max_attempts,
            record["type"],
            exc,
            extra={**self.fields, "outcome": "failed", "error_type": record["type"]},
        )
        observers().durable_workflow_failed(error=record, **self.fields)
        return WorkflowStatus.FAILED

    def cancel(self) -> None:
        """Stop the body at once: the workflow was cancelled."""
        self.cancelled = True
        self.body_scope.cancel()

    async def was_cancelled(self) -> WorkflowStatus:
        """The attempt ended because the workflow was cancelled (by a user, not a crash)."""
        await self._record_end("cancelled", None)
        logger.info(
            "workflow %s cancelled; its body was stopped",
            self.claimed.name,
            extra={**self.fields, "outcome": "cancelled"},
        )
        observers().durable_workflow_cancelled(**self.fields)
        return WorkflowStatus.CANCELLED

    def past_deadline(self) -> bool:
        """Whether the workflow's timeout has passed."""
        left = self.seconds_left()
        return left is not None and left <= 0

    def seconds_left(self) -> float | None:
        """Seconds until the workflow's timeout, if it has one."""
        deadline = self.claimed.deadline
        return None if deadline is None else (deadline - self.clock()).total_seconds()

    async def time_out(self) -> WorkflowStatus:
        """The workflow's timeout passed: cancel it and its unfinished children, with the
        timeout recorded as its error."""
        claimed = self.claimed
        exc = WorkflowTimeoutError(
            f"workflow {claimed.name} ({claimed.id}) timed out: its deadline "
            f"{claimed.deadline} passed"
        )
        error = dump_error(error_record(exc, step_index=None, step_name=None))
        # Recorded first: whoever sees the workflow cancelled sees why in its history.
        await self._record_end("timed_out", error)
        with contextlib.suppress(InvalidStateError):  # it ended meanwhile
            await self.store.cancel_workflow(claimed.id, error)
        logger.warning(
            "workflow %s timed out and was cancelled",
            claimed.name,
            extra={**self.fields, "outcome": "timed_out"},
        )
        observers().durable_workflow_cancelled(**self.fields)
        return WorkflowStatus.CANCELLED

    async def record_crash(self) -> None:
        """The attempt before this one ended by its lease expiring: record it as crashed."""
        crashed = self.claimed.crashed
        if crashed is None:
            return
        error = dump_error(
            {
                "type": "durable_core.crashed",
                "message": f"worker {crashed.worker_id} stopped renewing its lease (it crashed "
                "or stalled); the lease expired and another attempt took over",
                "traceback": None,
            }
        )
        ended = self.claimed.crashed_at
        await self.persist(lambda: self.store.record_attempt(crashed, "crashed", error, ended))

    async def _record_end(self, outcome: str, error: str | None) -> None:
        """Record how this attempt ended when it could not settle (the lease is gone)."""
        try:
            await self.store.record_attempt(self.lease, outcome, error)
        except FrameworkError as exc:
            logger.warning("could not record the attempt's end: %s", exc, extra=self.fields)

    def lost(self) -> None:
        """The lease was taken from under this attempt; its new owner settles the workflow."""
        logger.warning(
            "lost the lease on workflow %s; another worker owns it now",
            self.claimed.id,
            extra={**self.fields, "outcome": "lease_lost"},
        )
        observers().durable_lease_lost(**self.fields)

    def unsettled(self, exc: BaseException) -> None:
        """The attempt could not be settled: its lease will expire and it will be reclaimed."""
        if isinstance(exc, FrameworkError):
            logger.error(
                "could not settle workflow %s (%s); its lease will expire and it will be reclaimed",
                self.claimed.id,
                exc,
                extra={**self.fields, "outcome": "unsettled"},
            )
        else:
            logger.error(
                "internal error running workflow %s; its lease will expire and it will be "
                "reclaimed",
                self.claimed.id,
                exc_info=exc,
                extra={**self.fields, "outcome": "unsettled"},
            )
