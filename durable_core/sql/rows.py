"""Reading result rows into records for every SQL store; a corrupt row is reported, not guessed."""

from __future__ import annotations

import json
from typing import Any

from ..durations import utcnow
from ..errors import CorruptRecordError
from ..seams.records import (
    AttemptRecord,
    ClaimedWorkflow,
    Lease,
    StepRecord,
    StepStatus,
    StepTryRecord,
    WorkflowRecord,
    WorkflowStatus,
)
from .connector import Row

STEP_FIELDS = (
    "step_index",
    "step_name",
    "status",
    "input",
    "output",
    "error",
    "attempts",
    "path",
)
"""The step columns, in the order :func:`steps_from_json` expects them in each array."""


def workflow_status(workflow_id: str, value: str) -> WorkflowStatus:
    try:
        return WorkflowStatus(value)
    except ValueError as exc:
        raise CorruptRecordError(
            f"workflow {workflow_id} has an unknown status {value!r} in its row"
        ) from exc


def record_from_row(row: Row) -> WorkflowRecord:
    """A :class:`WorkflowRecord` from a row holding the ``workflows`` columns."""
    workflow_id = row["id"]
    return WorkflowRecord(
        id=workflow_id,
        name=row["name"],
        status=workflow_status(workflow_id, row["status"]),
        input=row["input"],
        output=row["output"],
        error=row["error"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        run_at=row["run_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        completed_at=row["completed_at"],
        locked_by=row["locked_by"],
        locked_until=row["locked_until"],
        parent_id=row["parent_id"],
        waiting_for=row["waiting_for"],
        deadline=row["deadline"],
        queue=row["queue"],
        priority=row["priority"],
        concurrency_key=row["concurrency_key"],
        started_at=row["started_at"],
        headers=headers_from_text(workflow_id, row["headers"]),
    )


def headers_from_text(workflow_id: str, text: str | None) -> dict[str, str] | None:
    """A row's ``headers`` column, a JSON object of strings."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CorruptRecordError(f"workflow {workflow_id} has headers that are not JSON") from exc
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise CorruptRecordError(
            f"workflow {workflow_id} has headers that are not an object of strings"
        )
    return value


def step_from_values(workflow_id: str, values: Any) -> StepRecord:
    """A :class:`StepRecord` from the step columns in :data:`STEP_FIELDS` order."""
    index, name, status, input, output, error, attempts, path = values
    try:
        step_status = StepStatus(status)
    except ValueError as exc:
        raise CorruptRecordError(
            f"step {index} of workflow {workflow_id} has an unknown status {status!r}"
        ) from exc
    return StepRecord(index, name, step_status, input, output, error, attempts, path=path)


def attempt_from_row(row: Row) -> AttemptRecord:
    """An :class:`AttemptRecord` from a ``workflow_attempts`` row."""
    return AttemptRecord(
        attempt=row["attempt"],
        worker=row["worker"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        outcome=row["outcome"],
        error=row["error"],
    )


def step_try_from_row(row: Row) -> StepTryRecord:
    """A :class:`StepTryRecord` from a ``workflow_step_tries`` row."""
    return StepTryRecord(
        step_index=row["step_index"],
        try_number=row["try_number"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        error=row["error"],
    )


def step_from_row(workflow_id: str, row: Row) -> StepRecord:
    """A :class:`StepRecord` from a row holding the ``workflow_steps`` columns."""
    return step_from_values(workflow_id, [row[field] for field in STEP_FIELDS])


def steps_from_json(workflow_id: str, text: str | None) -> tuple[StepRecord, ...] | None:
    """The cached steps a claim returned inline as a JSON array of arrays.

    ``None`` when one of them is corrupt: claiming must not fail for one bad row,
    so the executor then loads the steps itself and the corruption is settled on
    that workflow alone.
    """
    if text is None:
        return ()
    try:
        return tuple(step_from_values(workflow_id, values) for values in json.loads(text))
    except CorruptRecordError:
        return None


def claimed_from_row(
    row: Row, worker_id: str, *, steps: bool, crashed: bool = False
) -> ClaimedWorkflow:
    """A :class:`ClaimedWorkflow` from a claim's or an acquire's row.

    With ``steps``, the row carries the cached steps as JSON in its ``steps`` column;
    with ``crashed``, the holder of the expired lease it took over (``crashed_worker``,
    ``crashed_at``; NULL when the workflow was not running).
    """
    workflow_id = row["id"]
    attempts = row["attempts"]
    crashed_worker = row["crashed_worker"] if crashed else None
    return ClaimedWorkflow(
        id=workflow_id,
        name=row["name"],
        input=row["input"],
        attempts=attempts,
        max_attempts=row["max_attempts"],
        lease=Lease(workflow_id, row["lock_token"], worker_id, attempts, utcnow()),
        steps=steps_from_json(workflow_id, row["steps"]) if steps else None,
        parent_id=row["parent_id"],
        deadline=row["deadline"],
        crashed=(
            None
            if crashed_worker is None
            else Lease(workflow_id, "", crashed_worker, attempts - 1, None)
        ),
        crashed_at=row["crashed_at"] if crashed_worker is not None else None,
        queue=row["queue"],
        headers=headers_from_text(workflow_id, row["headers"]),
        due_at=row["run_at"],
    )
