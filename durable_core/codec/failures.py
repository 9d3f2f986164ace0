"""How an exception is recorded in the ``error`` columns, and raised again from them."""

from __future__ import annotations

import inspect
import json
import sys
import traceback
from typing import Any

from ..errors import (
    FrameworkError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowTimeoutError,
    leaf_errors,
    sole_error,
)
from ..seams.records import WorkflowStatus
from .formats import current_codec, registered_codec


def error_record(
    exc: BaseException, *, step_index: int | None = None, step_name: str | None = None
) -> dict[str, Any]:
    """The type, message, traceback and failing step of an exception, as a JSON-ready dict.

    An exception group that stands for one exception (a task group one branch of which
    failed) is recorded as that exception, so its type reaches whoever reads the error;
    one of several keeps each as a record of its own under ``details.exceptions``."""
    one = sole_error(exc)
    kind = type(one)
    record: dict[str, Any] = {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(one),
        "traceback": "".join(traceback.format_exception(exc)),
        "step_index": step_index,
        "step_name": step_name,
    }
    details = getattr(one, "recorded_details", None)
    if callable(details):  # what an error keeps besides its message (a saga's compensations)
        record["details"] = details()
    elif one is exc and isinstance(exc, BaseExceptionGroup):
        leaves = [error_record(leaf) for leaf in leaf_errors(exc)]
        for leaf in leaves:
            del leaf["step_index"], leaf["step_name"]
        record["details"] = {"exceptions": leaves}
    return record


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


SEALED = ("message", "traceback", "details")
"""What an error record keeps sealed when values are secret (its type and step stay in
clear: the failures page and ``durable list --error`` group by them)."""


def dump_error(record: dict[str, Any]) -> str:
    """Encode an error record for the ``error`` column (its type first). When this
    process writes with a codec that seals (an encrypting one), the message, traceback
    and details go into ``"sealed"``, sealed by it."""
    codec = current_codec()
    if codec.seals_errors and any(key in record for key in SEALED):
        hidden = {key: record[key] for key in SEALED if key in record}
        record = {key: value for key, value in record.items() if key not in SEALED}
        plain = json.dumps(hidden, ensure_ascii=False, default=repr)
        record["sealed"] = f"@{codec.name}:{codec.seal(plain)}"
    return json.dumps(record, ensure_ascii=False, default=repr)


def load_error(text: str | None) -> dict[str, Any] | None:
    """Decode an ``error`` column; a column that is not a JSON object comes back as its text.
    A sealed one is opened with its codec; without its key, its message says it is
    ``encrypted (key ...)``, its traceback is ``None``, and ``"sealed"`` stays."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {"type": None, "message": text, "traceback": None}
    if not isinstance(value, dict):
        return {"type": None, "message": text, "traceback": None}
    sealed = value.get("sealed")
    if isinstance(sealed, str):
        opened = _unseal(sealed)
        if opened is None:
            value.setdefault("message", f"encrypted ({_which(sealed)})")
            value.setdefault("traceback", None)
        else:
            del value["sealed"]
            value.update(opened)
    return value


def _unseal(sealed: str) -> dict[str, Any] | None:
    """The fields sealed in ``sealed`` (``@codec:payload``), or ``None`` without its key."""
    name, _, payload = sealed.removeprefix("@").partition(":")
    codec = registered_codec(name)
    if codec is None or not codec.seals_errors:
        return None
    try:
        opened = json.loads(codec.reveal(payload, what="an error's message"))
    except (FrameworkError, ValueError):
        return None
    return opened if isinstance(opened, dict) else None


def _which(sealed: str) -> str:
    """``key <id>`` of a sealed text, as the dashboard says it."""
    name, _, payload = sealed.removeprefix("@").partition(":")
    return f"{name}, key {payload.partition(':')[0]}"


def _type_name(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


_CANCELLED, _TIMED_OUT = _type_name(WorkflowCancelledError), _type_name(WorkflowTimeoutError)

_COMBINED: dict[type[Exception], type[WorkflowFailedError] | None] = {}
"""Each recorded type's class that is also a ``WorkflowFailedError`` (None: it cannot be)."""


def recorded_exception(
    workflow_id: str, status: WorkflowStatus, error: dict[str, Any] | None
) -> WorkflowFailedError:
    """What reading the output of workflow ``workflow_id`` raises when it ended ``status``
    (failed or cancelled) with ``error`` recorded (a :func:`load_error` dict).

    A failed workflow raises an instance of the recorded type that is also a
    :class:`WorkflowFailedError`, when that type is an ``Exception`` class in a module
    this process has imported already; else a plain ``WorkflowFailedError``. A
    cancelled one raises :class:`WorkflowCancelledError` (:class:`WorkflowTimeoutError`
    if it timed out). ``error`` is the exception's ``error``, its recorded traceback a
    note. Pure: it imports nothing and does no I/O.
    """
    record = error or {}
    message = record.get("message")
    message = "no error recorded" if message is None else str(message)
    exc: WorkflowFailedError | None
    if status is WorkflowStatus.CANCELLED:
        kind = WorkflowTimeoutError if record.get("type") == _TIMED_OUT else WorkflowCancelledError
        ours = record.get("type") in (_CANCELLED, _TIMED_OUT)  # they name the workflow
        exc = kind(message if ours else f"workflow {workflow_id} cancelled: {message}", error)
    else:
        text = f"workflow {workflow_id} {status.value}: {message}"
        exc = _as_recorded(_resolve(record.get("type")), text, error)
        if exc is None:
            exc = WorkflowFailedError(text, error)
    remote = record.get("traceback")
    if isinstance(remote, str) and remote:
        exc.add_note(f"Traceback recorded by workflow {workflow_id}:\n{remote.rstrip()}")
    return exc


def _resolve(name: object) -> type[Exception] | None:
    """The ``Exception`` class named ``module.qualname``, if its module is imported; looked
    up without importing or running a module's ``__getattr__``."""
    if not isinstance(name, str):
        return None
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        found: object = sys.modules.get(".".join(parts[:cut]))
        for part in parts[cut:]:
            if found is None:
                break
            found = inspect.getattr_static(found, part, None)
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return None


def _as_recorded(
    kind: type[Exception] | None, text: str, error: dict[str, Any] | None
) -> WorkflowFailedError | None:
    """An instance of ``kind`` that is also a ``WorkflowFailedError``, or None when there
    is none to make (a cancellation, a plain ``WorkflowFailedError``, an odd class)."""
    if kind is None or kind is WorkflowFailedError or issubclass(kind, WorkflowCancelledError):
        return None
    combined = _combined(kind)
    if combined is None:
        return None
    try:
        # Its own __init__ is not run: the recorded message is all there is to give it.
        exc = combined.__new__(combined, text)
        BaseException.__init__(exc, text)
        exc.error = error or {}
    except Exception:
        return None
    return exc


def _combined(kind: type[Exception]) -> type[WorkflowFailedError] | None:
    if kind in _COMBINED:
        return _COMBINED[kind]
    bases = (kind,) if issubclass(kind, WorkflowFailedError) else (kind, WorkflowFailedError)
    namespace = {
        "__module__": kind.__module__,  # recorded again, it names the original type
        "__qualname__": kind.__qualname__,
        "__doc__": kind.__doc__,
        "__str__": BaseException.__str__,  # the message, whatever the original prints
        "__repr__": BaseException.__repr__,
    }
    combined: type[WorkflowFailedError] | None
    try:
        combined = type(kind.__name__, bases, namespace)
    except Exception:  # a layout or MRO that cannot be combined, a refusing metaclass
        combined = None
    return _COMBINED.setdefault(kind, combined)
