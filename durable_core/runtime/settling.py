"""How an attempt ends: its settlement, its history row, its log line and its observer event.

The executor decides how an attempt ended (its body's result or error, or the
attempt's :class:`~durable_core.runtime.attempt.Ending`) and calls one function here, which
writes what that end needs through the attempt and reports it.
"""

from __future__ import annotations

import contextlib
import logging

from ..codec.failures import dump_error, error_record
from ..errors import (
    FrameworkError,
    InvalidStateError,
    LeaseLostError,
    WorkflowTimeoutError,
    is_retryable,
    leaf_errors,
)
from ..redaction import get_logger
from ..seams.compensation_role import compensations_of
from ..seams.plugins import observers, observing
from ..seams.records import Settlement, WorkflowStatus
from .attempt import Attempt
from .endings import Ending

logger = get_logger("durable_core.worker")


def claimed(attempt: Attempt) -> None:
    """The attempt began: the worker holds the lease and is about to run the body."""
    if not observing():
        return
    row, queue_wait = attempt.claimed, None
    if row.crashed is None and row.due_at is not None:
        taken = row.lease.started_at or attempt.clock()
        queue_wait = max(0.0, (taken - row.due_at).total_seconds())
    observers().durable_workflow_claimed(
        attempt=attempt.event, queue_wait=queue_wait, headers=row.headers or {}
    )


async def record_crash(attempt: Attempt) -> None:
    """The attempt before this one ended by its lease expiring: record it as crashed."""
    crashed = attempt.claimed.crashed
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
    ended = attempt.claimed.crashed_at
    await attempt.persist(lambda: attempt.store.record_attempt(crashed, "crashed", error, ended))


async def succeed(attempt: Attempt, output: str) -> WorkflowStatus:
    """Settle as succeeded with this output JSON."""
    row = attempt.claimed
    await _settle(attempt, WorkflowStatus.SUCCEEDED, output=output)
    if logger.isEnabledFor(logging.DEBUG):  # each success's line costs nothing at INFO
        logger.debug(
            "workflow %s succeeded", row.name, extra={**attempt.fields, "outcome": "succeeded"}
        )
    if observing():
        observers().durable_workflow_succeeded(attempt=attempt.event, output=output)
    return WorkflowStatus.SUCCEEDED


async def fail(
    attempt: Attempt, exc: BaseException, *, retryable: bool | None = None
) -> WorkflowStatus:
    """Settle a failed attempt: pending again after the backoff while the budget lasts
    (and the error can be retried), else failed."""
    row, policy = attempt.claimed, attempt.policy
    if retryable is None:
        given_up = {id(leaf) for given in attempt.given_up for leaf in leaf_errors(given)}
        if any(id(leaf) in given_up for leaf in leaf_errors(exc)):
            retryable = False
        elif policy is not None:
            retryable = policy.retries(exc)
        else:
            retryable = is_retryable(exc)
    index, name = attempt.failed_step or (None, None)
    record = error_record(exc, step_index=index, step_name=name)
    error = dump_error(record)
    if retryable and row.attempts < row.max_attempts:
        delay = (
            policy.delay(row.attempts)
            if policy is not None
            else attempt.config.retry_delay(row.attempts)
        )
        if row.deadline is not None:  # the retry is due by the deadline at the latest
            left = (row.deadline - attempt.clock()).total_seconds()
            delay = max(0.0, min(delay, left))
        await _settle(attempt, WorkflowStatus.PENDING, error=error, retry_delay_seconds=delay)
        logger.warning(
            "workflow %s attempt %d/%d failed (%s: %s); retrying in %.1fs",
            row.name,
            row.attempts,
            row.max_attempts,
            record["type"],
            record["message"],
            delay,
            extra={**attempt.fields, "outcome": "retry", "error_type": record["type"]},
        )
        observers().durable_retry_scheduled(
            attempt=attempt.event, error=record, delay_seconds=delay
        )
        return WorkflowStatus.PENDING
    await _settle(attempt, WorkflowStatus.FAILED, error=error)
    logger.error(
        "workflow %s failed on attempt %d/%d (%s: %s)",
        row.name,
        row.attempts,
        row.max_attempts,
        record["type"],
        record["message"],
        extra={**attempt.fields, "outcome": "failed", "error_type": record["type"]},
    )
    observers().durable_workflow_failed(attempt=attempt.event, error=record)
    return WorkflowStatus.FAILED


async def _settle(
    attempt: Attempt,
    status: WorkflowStatus,
    *,
    output: str | None = None,
    error: str | None = None,
    retry_delay_seconds: float = 0.0,
) -> None:
    """End the attempt as ``status``; a final status wakes the parent waiting on it."""
    parent = attempt.claimed.parent_id if status.is_terminal else None
    settlement = Settlement(
        attempt.lease,
        status,
        output=output,
        error=error,
        retry_delay_seconds=retry_delay_seconds,
        parent_id=parent,
    )
    await attempt.persist(lambda: attempt.writes.settle(settlement))


def waiting(attempt: Attempt) -> WorkflowStatus:
    """The attempt ended suspended: the row waits, holding no lease and no slot."""
    waits = attempt.suspended
    wake_at = min((wait.deadline for wait in waits if wait.deadline), default=None)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "workflow %s waiting for %s",
            attempt.claimed.name,
            ", ".join(wait.waiting_for for wait in waits),
            extra={**attempt.fields, "outcome": "waiting"},
        )
    observers().durable_workflow_waiting(
        attempt=attempt.event,
        waiting_for=waits[0].waiting_for if len(waits) == 1 else f"any:{len(waits)}",
        wake_at=wake_at,
    )
    return WorkflowStatus.WAITING


async def cancelled(attempt: Attempt) -> WorkflowStatus:
    """The attempt ended because the workflow was cancelled (by a user, not a crash): a
    cancel that was a request (its sagas owed compensations) is settled here."""
    if not await _settle_request(attempt):
        await _record_end(attempt, Ending.CANCELLED, None)
    logger.info(
        "workflow %s cancelled; its body was stopped",
        attempt.claimed.name,
        extra={**attempt.fields, "outcome": "cancelled"},
    )
    observers().durable_workflow_cancelled(attempt=attempt.event)
    return WorkflowStatus.CANCELLED


def timeout_error(attempt: Attempt) -> str:
    """The error JSON a timeout of the attempt's workflow records."""
    row = attempt.claimed
    exc = WorkflowTimeoutError(
        f"workflow {row.name} ({row.id}) timed out: its deadline {row.deadline} passed"
    )
    return dump_error(error_record(exc, step_index=None, step_name=None))


async def timed_out(attempt: Attempt) -> WorkflowStatus:
    """The workflow's timeout passed: cancel it and its unfinished children, with the
    timeout recorded as its error (saying which compensations ran, if a saga's did)."""
    row = attempt.claimed
    error = attempt.compensated_error or timeout_error(attempt)
    # Recorded first: whoever sees the workflow cancelled sees why in its history.
    await _record_end(attempt, Ending.TIMED_OUT, error)
    if attempt.compensated_error is not None:
        with contextlib.suppress(LeaseLostError):
            await attempt.committed()  # a saga's end first: then nothing is owed
    with contextlib.suppress(InvalidStateError):  # it ended meanwhile
        await attempt.store.cancel_workflow(row.id, error)
    logger.warning(
        "workflow %s timed out and was cancelled",
        row.name,
        extra={**attempt.fields, "outcome": "timed_out"},
    )
    observers().durable_workflow_cancelled(attempt=attempt.event)
    return WorkflowStatus.CANCELLED


async def _settle_request(attempt: Attempt) -> bool:
    """Settle as cancelled when the cancel was a request (the lease is still held)."""
    role = compensations_of(attempt.store)
    if role is None:
        return False
    parent = attempt.claimed.parent_id
    error = attempt.compensated_error
    try:
        await attempt.committed()  # the compensations' rows first (a group commit's)
        return await attempt.persist(
            lambda: role.settle_cancelled(attempt.lease, error, parent_id=parent)
        )
    except LeaseLostError:  # cancelled at once: the cancel ended the row itself
        return False


async def _record_end(attempt: Attempt, ending: Ending, error: str | None) -> None:
    """Record how the attempt ended when it could not settle (the lease is gone)."""
    try:
        await attempt.store.record_attempt(attempt.lease, ending.value, error)
    except FrameworkError as exc:
        logger.warning("could not record the attempt's end: %s", exc, extra=attempt.fields)


def lost(attempt: Attempt) -> None:
    """The lease was taken from under this attempt; its new owner settles the workflow."""
    logger.warning(
        "lost the lease on workflow %s; another worker owns it now",
        attempt.claimed.id,
        extra={**attempt.fields, "outcome": "lease_lost"},
    )
    observers().durable_lease_lost(attempt=attempt.event)


def unsettled(attempt: Attempt, exc: BaseException) -> None:
    """The attempt could not be settled: its lease will expire and it will be reclaimed."""
    observers().durable_attempt_unsettled(attempt=attempt.event, error=exc)
    if isinstance(exc, FrameworkError):
        logger.error(
            "could not settle workflow %s (%s); its lease will expire and it will be reclaimed",
            attempt.claimed.id,
            exc,
            extra={**attempt.fields, "outcome": "unsettled"},
        )
    else:
        logger.error(
            "internal error running workflow %s; its lease will expire and it will be reclaimed",
            attempt.claimed.id,
            exc_info=exc,
            extra={**attempt.fields, "outcome": "unsettled"},
        )
