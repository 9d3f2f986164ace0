"""Entry-point observer: appends every event as a JSON line to ``$DURABLE_EXAMPLE_EVENTS``.

While the variable is unset it records nothing, so installing the package
changes nothing for other code in the same environment.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from durable_core.seams.events import ATTEMPT_FIELDS, AttemptEvent
from durable_core.seams.hookspecs import hookimpl

EVENTS_ENV = "DURABLE_EXAMPLE_EVENTS"


def _record(event: str, attempt: AttemptEvent | None = None, **fields: Any) -> None:
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    if attempt is not None:  # the attempt's fields first, as separate keys
        fields = {name: getattr(attempt, name) for name in ATTEMPT_FIELDS} | fields
    if isinstance(fields.get("error"), BaseException):
        exc = fields["error"]
        fields["error"] = f"{type(exc).__name__}: {exc}"
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps({"event": event, **fields}, default=repr) + "\n")


@hookimpl
def durable_workflow_enqueued(workflow_id: str, workflow_name: str, max_attempts: int) -> None:
    _record(
        "workflow_enqueued",
        workflow_id=workflow_id,
        workflow_name=workflow_name,
        max_attempts=max_attempts,
    )


@hookimpl
def durable_workflow_claimed(attempt: AttemptEvent) -> None:
    _record("workflow_claimed", attempt)


@hookimpl
def durable_step_started(attempt: AttemptEvent, step_index: int, step_name: str) -> None:
    _record(
        "step_started",
        attempt,
        step_index=step_index,
        step_name=step_name,
    )


@hookimpl
def durable_step_succeeded(
    attempt: AttemptEvent, step_index: int, step_name: str, cached: bool
) -> None:
    _record(
        "step_succeeded",
        attempt,
        step_index=step_index,
        step_name=step_name,
        cached=cached,
    )


@hookimpl
def durable_step_failed(
    attempt: AttemptEvent, step_index: int, step_name: str, error: BaseException
) -> None:
    _record(
        "step_failed",
        attempt,
        step_index=step_index,
        step_name=step_name,
        error=error,
    )


@hookimpl
def durable_retry_scheduled(
    attempt: AttemptEvent, error: dict[str, Any], delay_seconds: float
) -> None:
    _record(
        "retry_scheduled",
        attempt,
        error_type=error.get("type"),
        delay_seconds=delay_seconds,
    )


@hookimpl
def durable_workflow_succeeded(attempt: AttemptEvent, output: str) -> None:
    _record(
        "workflow_succeeded",
        attempt,
        output=output,
    )


@hookimpl
def durable_workflow_failed(attempt: AttemptEvent, error: dict[str, Any]) -> None:
    _record(
        "workflow_failed",
        attempt,
        error_type=error.get("type"),
    )


@hookimpl
def durable_workflow_waiting(
    attempt: AttemptEvent, waiting_for: str, wake_at: datetime | None
) -> None:
    _record(
        "waiting",
        attempt,
        waiting_for=waiting_for,
        wake_at=None if wake_at is None else wake_at.isoformat(),
    )


@hookimpl
def durable_workflow_cancelled(attempt: AttemptEvent) -> None:
    _record("cancelled", attempt)


@hookimpl
def durable_lease_lost(attempt: AttemptEvent) -> None:
    _record("lease_lost", attempt)


@hookimpl
def durable_worker_started(worker_id: str, concurrency: int) -> None:
    _record("worker_started", worker_id=worker_id, concurrency=concurrency)


@hookimpl
def durable_worker_stopping(worker_id: str, in_flight: int) -> None:
    _record("worker_stopping", worker_id=worker_id, in_flight=in_flight)


@hookimpl
def durable_attempt_unsettled(attempt: AttemptEvent, error: BaseException) -> None:
    _record(
        "attempt_unsettled",
        attempt,
        error=error,
    )


@hookimpl
def durable_message_sent(workflow_id: str, topic: str) -> None:
    _record("message_sent", workflow_id=workflow_id, topic=topic)


@hookimpl
def durable_claim_finished(worker_id: str, claimed: int, limit: int) -> None:
    _record("claim_finished", worker_id=worker_id, claimed=claimed, limit=limit)


@hookimpl
def durable_group_commit_flushed(writes: int, steps: int, settlements: int) -> None:
    _record("group_commit_flushed", writes=writes, steps=steps, settlements=settlements)
