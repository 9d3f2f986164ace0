"""How the dashboard shows stored values: decoded JSON, errors, durations and timelines.

Stored values are shown decoded but never imported: a tagged value (a dataclass,
an enum, a pydantic model) is written as its type's name with its fields, so
the dashboard runs no code of the application whose workflows it shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..codec import TAG_KEY
from ..codec.erasure import ERASED
from ..codec.failures import load_error
from ..codec.formats import registered_codec
from ..errors import FrameworkError
from ..redaction import redact
from ..seams.records import StepRecord, StepTryRecord, WorkflowRecord

MAX_SHOWN = 10_000
"""The most characters of one value, message or traceback a page (or ``durable show``)
shows: a megabyte of error makes no megabytes of page."""


def cut(text: str, limit: int = MAX_SHOWN) -> str:
    """``text``, cut to ``limit`` characters with a note of how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def _tree(text: str) -> tuple[bool, Any]:
    """``(True, parsed)`` for stored JSON (an encrypted value decrypted first, when this
    process has its key); ``(False, shown)`` for text that is not JSON, is nested past what
    can be read (``shown``: the text), is encrypted with a key it lacks or was erased
    (``shown``: saying so)."""
    if text.startswith("@"):
        name, _, payload = text[1:].partition(":")
        if name == ERASED:
            return False, "erased"
        codec = registered_codec(name)
        if codec is not None and codec.seals_errors:
            try:
                text = codec.reveal(payload)
            except FrameworkError:
                return False, f"encrypted ({name}, key {payload.partition(':')[0]})"
        elif name == "aes-gcm":
            return False, f"encrypted ({name}, key {payload.partition(':')[0]})"
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, text


def show_value(text: str | None) -> str:
    """A stored JSON value as readable Python-like text (``""`` for none), credentials
    masked and cut to :data:`MAX_SHOWN` characters; ``encrypted (aes-gcm, key K)`` for a
    value encrypted under a key this process has not been given."""
    if text is None:
        return ""
    parsed, tree = _tree(text)
    return cut(redact(_show(tree, 0) if parsed else tree))


def show_arguments(text: str) -> str:
    """A workflow's or step's stored arguments (``{"args": [...], "kwargs": {...}}`` or a
    list of positional arguments) as a call's argument list, credentials masked and cut
    to :data:`MAX_SHOWN` characters."""
    parsed, tree = _tree(text)
    if not parsed:
        return cut(redact(tree))
    if isinstance(tree, dict) and set(tree) <= {"args", "kwargs"} and tree:
        parts = [_show(v, 0) for v in tree.get("args", [])]
        parts += [f"{k}={_show(v, 0)}" for k, v in (tree.get("kwargs") or {}).items()]
        return cut(redact("(" + ", ".join(parts) + ")"))
    return cut(redact(_show(tree, 0)))


def _show(tree: Any, depth: int) -> str:
    if depth > 20:
        return "…"
    if isinstance(tree, list):
        return "[" + ", ".join(_show(v, depth + 1) for v in tree) + "]"
    if not isinstance(tree, dict):
        return json.dumps(tree, ensure_ascii=False)
    kind = tree.get(TAG_KEY)
    if not isinstance(kind, str):
        items = (
            f"{json.dumps(k, ensure_ascii=False)}: {_show(v, depth + 1)}" for k, v in tree.items()
        )
        return "{" + ", ".join(items) + "}"
    return _show_tagged(kind, tree, depth)


def _show_tagged(kind: str, tree: dict[str, Any], depth: int) -> str:
    items = [_show(v, depth + 1) for v in tree.get("items", [])]
    type_name = str(tree.get("type", kind)).replace(":", ".")
    if kind == "tuple":
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if kind in ("set", "frozenset"):
        return f"{kind}({{{', '.join(items)}}})"
    if kind == "dict":
        pairs = (f"{_show(k, depth + 1)}: {_show(v, depth + 1)}" for k, v in tree.get("items", []))
        return "{" + ", ".join(pairs) + "}"
    if kind == "dataclass":
        fields = tree.get("fields", {})
        return (
            f"{type_name}("
            + ", ".join(f"{k}={_show(v, depth + 1)}" for k, v in fields.items())
            + ")"
        )
    if kind == "pydantic":
        data = tree.get("data", {})
        return (
            f"{type_name}(" + ", ".join(f"{k}={_show(v, depth + 1)}" for k, v in data.items()) + ")"
        )
    if kind == "custom":  # a class stored by the codec registered for it
        return f"{type_name}({_show(tree.get('data'), depth + 1)})"
    if kind == "namedtuple":
        return f"{type_name}(" + ", ".join(items) + ")"
    if kind == "enum":
        return f"{type_name}({_show(tree.get('value'), depth + 1)})"
    if kind == "bytes" or kind == "bytearray":
        return f"{kind}(base64 {tree.get('b64', '')!s})"
    if kind == "timedelta":
        seconds = tree.get("days", 0) * 86400 + tree.get("seconds", 0)
        return f"timedelta({seconds + tree.get('microseconds', 0) / 1e6:g}s)"
    if "value" in tree:
        return f"{kind}({tree['value']})"
    rest = {k: v for k, v in tree.items() if k != TAG_KEY}
    return f"{kind}{json.dumps(rest, ensure_ascii=False)}"


def duration(start: datetime | None, end: datetime | None) -> str:
    """``start`` to ``end`` as ``850 ms``, ``12.3 s``, ``4 min 5 s`` or ``2 h 10 min``."""
    if start is None or end is None:
        return ""
    return short_duration(end - start)


def short_duration(delta: timedelta) -> str:
    """A duration in the largest unit that keeps it short."""
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def error_of(text: str | None) -> dict[str, Any] | None:
    """A stored error: its type, message, traceback and step (with no credential in its
    text: an exception's message may carry a connection string; each cut to
    :data:`MAX_SHOWN` characters)."""
    error = load_error(text)
    if error is None:
        return None
    for key in ("message", "traceback"):
        if isinstance(error.get(key), str):
            error[key] = cut(redact(error[key]))
    return error


def shorten(text: object, limit: int = 120) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def seconds(value: float | None) -> str:
    """A number of seconds as a short duration (``""`` for none)."""
    return "" if value is None else short_duration(timedelta(seconds=value))


def tries_by_step(tries: list[StepTryRecord]) -> dict[int, list[StepTryRecord]]:
    """The failed tries of each step, by step index, oldest first."""
    grouped: dict[int, list[StepTryRecord]] = {}
    for one in tries:
        grouped.setdefault(one.step_index, []).append(one)
    return grouped


@dataclass(frozen=True)
class TimelineStep:
    """One step with its place on the workflow's timeline (percentages of its width)."""

    step: StepRecord
    offset: float
    width: float
    took: str


def timeline(record: WorkflowRecord, steps: list[StepRecord], now: datetime) -> list[TimelineStep]:
    """The steps placed on a bar from the workflow's creation to its end (or now)."""
    start = record.created_at
    end = record.completed_at or now
    for step in steps:
        if step.started_at is not None:
            start = min(start, step.started_at)
        end = max(end, step.completed_at or step.started_at or end)
    span = max((end - start).total_seconds(), 1e-6)
    placed = []
    for step in steps:
        began = step.started_at or start
        ended = step.completed_at or (now if step.status.value in ("running", "waiting") else began)
        offset = (began - start).total_seconds() / span * 100
        width = max((ended - began).total_seconds() / span * 100, 0.5)
        placed.append(
            TimelineStep(
                step, min(offset, 99.5), min(width, 100 - min(offset, 99.5)), duration(began, ended)
            )
        )
    return placed
