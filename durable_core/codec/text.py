"""JSON text: compact dumping, strict parsing, and the helpers every codec module shares.

Only :mod:`json`'s public API is used (no private encoder hooks).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = [
    "INT_LIMIT",
    "TAG_KEY",
    "DecodeProblem",
    "Mismatch",
    "Problem",
    "Refusal",
    "call_text",
    "is_native",
    "json_text",
    "native_or_false",
    "reject_constant",
    "short",
    "to_text",
    "type_name",
]

TAG_KEY = "__durable__"
"""The reserved key that marks a tagged (non JSON-native) value in stored JSON."""

# Ints at or beyond this magnitude are stored as hex: 2**2000 has 603 decimal digits, below the
# smallest limit ``sys.set_int_max_str_digits`` accepts (640), so plain literals always parse.
INT_LIMIT = 1 << 2000

json_text: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
).encode
"""Dump a JSON-native tree as compact text (non-ASCII kept as it is)."""

_json_text_ascii: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=True, separators=(",", ":"), allow_nan=False, check_circular=False
).encode


_SCALARS: dict[type, Callable[[Any], str]] = {
    int: int.__repr__,  # what json itself writes an int as (bool, a subclass, is not here)
    str: json_text,  # the encoder's own fast path for a str, without building an encoder
    type(None): lambda _: "null",
    bool: lambda v: "true" if v else "false",
}


def call_text(args: list[Any], kwargs: dict[str, Any]) -> str | None:
    """``{"args": [...], "kwargs": {}}`` written without building a JSON encoder, when the
    arguments are plain scalars (ints, text, booleans, ``None``) and there are no keyword
    arguments; else ``None``. Checked as :func:`is_native` would check it."""
    if kwargs:
        return None
    parts = []
    for arg in args:
        dump = _SCALARS.get(type(arg))
        if dump is None or (type(arg) is int and not -INT_LIMIT < arg < INT_LIMIT):
            return None
        parts.append(dump(arg))
    text = '{"args":[' + ",".join(parts) + '],"kwargs":{}}'
    return text if text.isascii() else None


def to_text(tree: Any) -> str:
    """Dump a JSON-native tree; escape everything if it holds text UTF-8 cannot carry."""
    if type(tree) is int:
        return int.__repr__(tree)
    text = json_text(tree)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: \\u-escapes keep the text storable
            text = _json_text_ascii(tree)
    return text


class Problem(Exception):
    """A problem inside a value; containers append path segments while it unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []

    def path(self, root: str) -> str:
        return root + "".join(reversed(self.segments))


class Refusal(Problem):
    """The value cannot be encoded."""


class Mismatch(Problem):
    """The value would not read back identical."""


class DecodeProblem(Exception):
    """Stored text cannot be turned back into a value."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def reject_constant(name: str) -> object:
    """``parse_constant`` for :class:`json.JSONDecoder`: NaN and Infinity are not JSON."""
    raise DecodeProblem(f"stored text contains {name}, which is not valid JSON")


def type_name(t: Any) -> str:
    """``module.qualname`` of a class (``qualname`` alone for builtins), else its repr."""
    if not isinstance(t, type):
        return repr(t)
    module = getattr(t, "__module__", None)
    qualname = getattr(t, "__qualname__", t.__name__)
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def short(value: object, limit: int = 60) -> str:
    """A repr of ``value`` cut to ``limit`` characters, never raising."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type_name(type(value))} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_native(v: Any) -> bool:
    """True if ``v`` is made only of values JSON stores exactly as they are."""
    t = type(v)
    if t is str or t is bool or v is None:
        return True
    if t is int:
        return -INT_LIMIT < v < INT_LIMIT  # type: ignore[no-any-return]
    if t is float:
        return v - v == 0.0  # type: ignore[no-any-return]  # False for nan and +-inf
    if t is dict:
        for k, x in v.items():
            if type(k) is not str or k == TAG_KEY or not is_native(x):
                return False
        return True
    if t is list:
        for x in v:  # noqa: SIM110
            if not is_native(x):
                return False
        return True
    return False


def native_or_false(v: Any) -> bool:
    """:func:`is_native`, False for values too deeply nested to check."""
    try:
        return is_native(v)
    except RecursionError:  # deeply nested or circular: let the slow path explain
        return False
