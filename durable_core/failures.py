"""How an exception is recorded in the ``error`` columns."""

from __future__ import annotations

import json
import traceback
from typing import Any

from .errors import WorkflowCancelledError


def error_record(
    exc: BaseException, *, step_index: int | None = None, step_name: str | None = None
) -> dict[str, Any]:
    """The type, message, traceback and failing step of an exception, as a JSON-ready dict."""
    kind = type(exc)
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "step_index": step_index,
        "step_name": step_name,
    }


def cancellation_record(workflow_id: str, parent_id: str | None = None) -> dict[str, Any]:
    """The error a cancel records: a :class:`WorkflowCancelledError` naming the workflow
    (and the parent it was cancelled with)."""
    kind = WorkflowCancelledError
    message = f"workflow {workflow_id} was cancelled"
    if parent_id is not None:
        message += f" with its parent {parent_id}"
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": message,
        "traceback": None,
        "step_index": None,
        "step_name": None,
    }


def dump_error(record: dict[str, Any]) -> str:
    """Encode an error record for the ``error`` column."""
    return json.dumps(record, ensure_ascii=False, default=repr)


def load_error(text: str | None) -> dict[str, Any] | None:
    """Decode an ``error`` column; a column that is not a JSON object comes back as its text."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return {"type": None, "message": text, "traceback": None}
    if isinstance(value, dict):
        return value
    return {"type": None, "message": text, "traceback": None}
