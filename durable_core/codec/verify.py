"""Verification: is a value read back structurally identical to the one stored?

Types are compared exactly and recursively; a class with a registered codec is compared by
what its codec makes of each side.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from .decode import MISSING
from .encode import PATH_TYPES, dataclass_info, tz_tree
from .registry import entry_for, pydantic_base
from .text import Mismatch, short, type_name

__all__ = ["same"]


def _mismatch(a: object, b: object) -> Mismatch:
    return Mismatch(f"stored {short(a)} but would read back {short(b)}")


def same(a: Any, b: Any) -> None:
    t = type(a)
    if type(b) is not t:
        raise Mismatch(
            f"stored a {type_name(t)} but would read back a {type_name(type(b))} ({short(b)})"
        )
    if t is str or t is int or t is bool or a is None:
        if a != b:
            raise _mismatch(a, b)
        return
    compare = _SAME_BY_TYPE.get(t)
    if compare is not None:
        compare(a, b)
    else:
        _same_other(a, b)


def _same_float(a: float, b: float) -> None:
    if a != b:
        if a != a and b != b:  # both nan
            return
        raise _mismatch(a, b)
    if a == 0.0 and str(a) != str(b):  # -0.0 vs 0.0
        raise _mismatch(a, b)


def _same_sequence(a: list[Any] | tuple[Any, ...], b: list[Any] | tuple[Any, ...]) -> None:
    if len(a) != len(b):
        raise Mismatch(f"stored {len(a)} items but would read back {len(b)}")
    i = 0
    try:
        for i, x in enumerate(a):
            same(x, b[i])
    except Mismatch as m:
        m.segments.append(f"[{i}]")
        raise


def _same_dict(a: dict[Any, Any], b: dict[Any, Any]) -> None:
    if len(a) != len(b):
        raise Mismatch(f"stored {len(a)} keys but would read back {len(b)}")
    for (ka, xa), (kb, xb) in zip(a.items(), b.items(), strict=True):
        try:
            same(ka, kb)
        except Mismatch as m:
            m.segments.append(f"<key {short(ka)}>")
            raise
        try:
            same(xa, xb)
        except Mismatch as m:
            m.segments.append(f"[{short(ka)}]")
            raise


def _same_set(a: set[Any] | frozenset[Any], b: set[Any] | frozenset[Any]) -> None:
    if len(a) != len(b):
        raise Mismatch(f"stored {len(a)} items but would read back {len(b)}")
    by_item = {x: x for x in b}
    for x in a:
        y = by_item.get(x, MISSING)
        if y is MISSING:
            raise Mismatch(f"item {short(x)} would not be found in the set read back")
        try:
            same(x, y)
        except Mismatch as m:
            m.segments.append(f"<item {short(x)}>")
            raise


def _same_complex(a: complex, b: complex) -> None:
    _same_float(a.real, b.real)
    _same_float(a.imag, b.imag)


def _same_datetime(a: datetime | time, b: datetime | time) -> None:
    if (
        a.replace(tzinfo=None) != b.replace(tzinfo=None)
        or a.fold != b.fold
        or tz_tree(a.tzinfo) != tz_tree(b.tzinfo)
    ):
        raise _mismatch(a, b)


def _same_decimal(a: Decimal, b: Decimal) -> None:
    if a.as_tuple() != b.as_tuple():
        raise _mismatch(a, b)


def _same_eq(a: Any, b: Any) -> None:
    if a != b:
        raise _mismatch(a, b)


_SAME_BY_TYPE: dict[type, Callable[[Any, Any], None]] = {
    float: _same_float,
    list: _same_sequence,
    tuple: _same_sequence,
    dict: _same_dict,
    set: _same_set,
    frozenset: _same_set,
    complex: _same_complex,
    datetime: _same_datetime,
    time: _same_datetime,
    Decimal: _same_decimal,
    bytes: _same_eq,
    bytearray: _same_eq,
    date: _same_eq,
    timedelta: _same_eq,
    uuid.UUID: _same_eq,
    **{cls: _same_eq for cls in PATH_TYPES.values()},
}


def _same_attributes(a: Any, b: Any, names: Iterable[str]) -> None:
    name = ""
    try:
        for name in names:
            same(getattr(a, name), getattr(b, name, MISSING))
    except Mismatch as m:
        m.segments.append(f".{name}")
        raise


def _same_other(a: Any, b: Any) -> None:
    t = type(a)
    entry = entry_for(t)
    if entry is not None and entry.encode is not None:
        try:
            same(entry.encode(a), entry.encode(b))
        except Mismatch as m:
            m.segments.append(f"<{entry.name} data>")
            raise
    elif isinstance(a, enum.Enum):
        if a is not b:
            raise _mismatch(a, b)
    elif hasattr(t, "__dataclass_fields__"):
        _same_attributes(a, b, (name for name, _ in dataclass_info(t)[1]))
    elif isinstance(a, tuple) and hasattr(t, "_fields"):
        _same_attributes(a, b, t._fields)
    elif (base := pydantic_base()) is not None and isinstance(a, base):
        _same_attributes(a, b, t.model_fields)
        extra_a, extra_b = a.__pydantic_extra__, b.__pydantic_extra__
        if extra_a or extra_b:
            _same_attributes(a, b, {**(extra_a or {}), **(extra_b or {})})
    else:  # pragma: no cover - _tree refuses every other type
        _same_eq(a, b)
