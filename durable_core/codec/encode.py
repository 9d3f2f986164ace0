"""Encoding: a value becomes a tree of JSON-native values, tagged where JSON has no type.

See :mod:`durable_core.codec` for the tags. Classes are stored under the name the registry
gives them (:mod:`durable_core.codec.registry`); a registered codec turns a user's own class
into a storable value.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import inspect
import pathlib
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

from .registry import entry_for, pydantic_base, stored_name
from .text import INT_LIMIT, TAG_KEY, Refusal, json_text, short, type_name

__all__ = ["PATH_TYPES", "dataclass_info", "pydantic_validate_by_name", "tree", "tz_tree"]

SUPPORTED = (
    "None, bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset, "
    "datetime, date, time, timedelta, UUID, Decimal, pathlib paths, Enum members, dataclasses, "
    "NamedTuples, pydantic models and classes registered with a codec (register_type)"
)

_TypeInfo = tuple[str, tuple[tuple[str, bool], ...]]
_dataclass_infos: dict[type, _TypeInfo] = {}


def _enter(v: object, active: set[int]) -> None:
    key = id(v)
    if key in active:
        raise Refusal(f"circular reference: this {type_name(type(v))} contains itself")
    active.add(key)


def tree(v: Any, active: set[int]) -> Any:
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        if -INT_LIMIT < v < INT_LIMIT:
            return v
        return {TAG_KEY: "int", "hex": format(v, "x")}
    if t is float:
        if v - v == 0.0:
            return v
        return {TAG_KEY: "float", "value": "nan" if v != v else ("inf" if v > 0 else "-inf")}
    encoder = _TREE_BY_TYPE.get(t)
    if encoder is not None:
        return encoder(v, active)
    return _tree_other(v, active)


def _tree_items(v: Iterable[Any], active: set[int]) -> list[Any]:
    _enter(v, active)
    out: list[Any] = []
    i = 0
    try:
        for i, x in enumerate(v):  # noqa: B007 - i is read by the handler
            out.append(tree(x, active))
    except Refusal as r:
        r.segments.append(f"[{i}]")
        raise
    active.discard(id(v))
    return out


def _str_dict_tree(d: dict[str, Any]) -> Any:
    """Wrap an already-encoded str-keyed dict if one of its keys is the tag key."""
    if TAG_KEY in d:
        return {TAG_KEY: "dict", "items": [[k, x] for k, x in d.items()]}
    return d


def _tree_list(v: list[Any], active: set[int]) -> Any:
    return _tree_items(v, active)


def _tree_tuple(v: tuple[Any, ...], active: set[int]) -> Any:
    return {TAG_KEY: "tuple", "items": _tree_items(v, active)}


def _tree_dict(v: dict[Any, Any], active: set[int]) -> Any:
    _enter(v, active)
    k: Any = None
    plain = all(type(k) is str for k in v) and TAG_KEY not in v
    if plain:
        out: dict[str, Any] = {}
        try:
            for k, x in v.items():
                out[k] = tree(x, active)
        except Refusal as r:
            r.segments.append(f"[{short(k)}]")
            raise
        active.discard(id(v))
        return out
    pairs: list[list[Any]] = []
    in_key = True
    try:
        for k, x in v.items():
            in_key = True
            key_tree = tree(k, active)
            in_key = False
            pairs.append([key_tree, tree(x, active)])
    except Refusal as r:
        r.segments.append(f"<key {short(k)}>" if in_key else f"[{short(k)}]")
        raise
    active.discard(id(v))
    return {TAG_KEY: "dict", "items": pairs}


def _tree_set(v: set[Any] | frozenset[Any], active: set[int]) -> Any:
    _enter(v, active)
    encoded: list[tuple[str, Any]] = []
    x: Any = None
    try:
        for x in v:
            item = tree(x, active)
            encoded.append((json_text(item), item))
    except Refusal as r:
        r.segments.append(f"<item {short(x)}>")
        raise
    active.discard(id(v))
    encoded.sort(key=lambda pair: pair[0])
    kind = "set" if type(v) is set else "frozenset"
    return {TAG_KEY: kind, "items": [item for _, item in encoded]}


def _tree_bytes(v: bytes | bytearray, active: set[int]) -> Any:
    kind = "bytes" if type(v) is bytes else "bytearray"
    return {TAG_KEY: kind, "b64": base64.b64encode(v).decode("ascii")}


def _tree_complex(v: complex, active: set[int]) -> Any:
    return {TAG_KEY: "complex", "real": tree(v.real, active), "imag": tree(v.imag, active)}


def tz_tree(tz: Any) -> Any:
    if tz is None:
        return None
    if type(tz) is timezone:
        offset = tz.utcoffset(None)
        out: dict[str, Any] = {"offset": offset.days * 86400 + offset.seconds}
        if offset.microseconds:
            out["us"] = offset.microseconds
        name = tz.tzname(None)
        if name != timezone(offset).tzname(None):
            out["name"] = name
        return out
    if type(tz) is zoneinfo.ZoneInfo:
        if tz.key is None:
            raise Refusal("a ZoneInfo loaded from a file has no key to store it by")
        return {"zone": tz.key}
    raise Refusal(
        f"tzinfo of type {type_name(type(tz))} is not supported; use datetime.timezone or "
        "zoneinfo.ZoneInfo"
    )


def _tree_datetime(v: datetime | time, active: set[int]) -> Any:
    kind = "datetime" if type(v) is datetime else "time"
    out = {TAG_KEY: kind, "value": v.isoformat(), "tz": tz_tree(v.tzinfo)}
    if v.fold:
        out["fold"] = 1
    return out


def _tree_date(v: date, active: set[int]) -> Any:
    return {TAG_KEY: "date", "value": v.isoformat()}


def _tree_timedelta(v: timedelta, active: set[int]) -> Any:
    return {
        TAG_KEY: "timedelta",
        "days": v.days,
        "seconds": v.seconds,
        "microseconds": v.microseconds,
    }


def _tree_uuid(v: uuid.UUID, active: set[int]) -> Any:
    return {TAG_KEY: "uuid", "value": str(v)}


def _tree_decimal(v: Decimal, active: set[int]) -> Any:
    return {TAG_KEY: "decimal", "value": str(v)}


PATH_TYPES: dict[str, type[pathlib.PurePath]] = {
    cls.__name__: cls
    for cls in (
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
        pathlib.PosixPath,
        pathlib.WindowsPath,
    )
}


def _tree_path(v: pathlib.PurePath, active: set[int]) -> Any:
    return {TAG_KEY: "path", "type": type(v).__name__, "value": str(v)}


_TREE_BY_TYPE: dict[type, Callable[[Any, set[int]], Any]] = {
    list: _tree_list,
    dict: _tree_dict,
    tuple: _tree_tuple,
    set: _tree_set,
    frozenset: _tree_set,
    bytes: _tree_bytes,
    bytearray: _tree_bytes,
    complex: _tree_complex,
    datetime: _tree_datetime,
    time: _tree_datetime,
    date: _tree_date,
    timedelta: _tree_timedelta,
    uuid.UUID: _tree_uuid,
    Decimal: _tree_decimal,
    **{cls: _tree_path for cls in PATH_TYPES.values()},
}


def dataclass_info(cls: type) -> _TypeInfo:
    info = _dataclass_infos.get(cls)
    if info is None:
        ref = stored_name(cls, "dataclass")
        fields = tuple((f.name, f.init) for f in dataclasses.fields(cls))
        info = (ref, fields)
        _dataclass_infos[cls] = info
    return info


def _tree_custom(v: Any, active: set[int], name: str, encode: Callable[[Any], object]) -> Any:
    try:
        data = encode(v)
    except Exception as exc:
        raise Refusal(
            f"the codec registered for {type_name(type(v))} failed: {type(exc).__name__}: {exc}"
        ) from exc
    _enter(v, active)
    try:
        data_tree = tree(data, active)
    except Refusal as r:
        r.segments.append(f"<{name} data>")
        raise
    active.discard(id(v))
    return {TAG_KEY: "custom", "type": name, "data": data_tree}


def _tree_other(v: Any, active: set[int]) -> Any:
    t = type(v)
    entry = entry_for(t)
    if entry is not None and entry.encode is not None:
        return _tree_custom(v, active, entry.name, entry.encode)
    if isinstance(v, enum.Enum):
        ref = stored_name(t, "enum")
        try:
            value = tree(v.value, active)
        except Refusal as r:
            r.segments.append(".value")
            raise
        return {TAG_KEY: "enum", "type": ref, "value": value}
    if hasattr(t, "__dataclass_fields__"):
        ref, fields = dataclass_info(t)
        _enter(v, active)
        out: dict[str, Any] = {}
        name = ""
        try:
            for name, _init in fields:
                try:
                    x = getattr(v, name)
                except AttributeError:
                    raise Refusal(f"field {name!r} of {type_name(t)} is not set") from None
                out[name] = tree(x, active)
        except Refusal as r:
            r.segments.append(f".{name}")
            raise
        active.discard(id(v))
        return {TAG_KEY: "dataclass", "type": ref, "fields": _str_dict_tree(out)}
    if isinstance(v, tuple) and hasattr(t, "_fields") and hasattr(t, "_make"):
        ref = stored_name(t, "NamedTuple")
        names: tuple[str, ...] = t._fields
        _enter(v, active)
        items: list[Any] = []
        i = 0
        try:
            for i, x in enumerate(v):  # noqa: B007 - i is read by the handler
                items.append(tree(x, active))
        except Refusal as r:
            r.segments.append(f".{names[i]}" if i < len(names) else f"[{i}]")
            raise
        active.discard(id(v))
        return {TAG_KEY: "namedtuple", "type": ref, "items": items}
    base = pydantic_base()
    if base is not None and isinstance(v, base):
        return _tree_pydantic(v, active)
    raise Refusal(f"unsupported type {type_name(t)} (supported: {SUPPORTED})")


_pydantic_by_name: bool | None = None


def pydantic_validate_by_name(cls: Any) -> bool:
    """Whether ``model_validate`` takes ``by_name`` (pydantic >= 2.11)."""
    global _pydantic_by_name
    if _pydantic_by_name is None:
        try:
            params = inspect.signature(cls.model_validate).parameters
            _pydantic_by_name = "by_name" in params
        except (TypeError, ValueError):  # pragma: no cover
            _pydantic_by_name = False
    return _pydantic_by_name


def _tree_pydantic(v: Any, active: set[int]) -> Any:
    t = type(v)
    ref = stored_name(t, "pydantic model")
    by_alias = not pydantic_validate_by_name(t)
    try:
        data = v.model_dump(mode="python", round_trip=True, by_alias=by_alias, warnings=False)
    except Exception as exc:
        raise Refusal(f"{type_name(t)}.model_dump() failed: {type(exc).__name__}: {exc}") from exc
    _enter(v, active)
    if type(data) is dict and all(type(k) is str for k in data):
        out: dict[str, Any] = {}
        key = ""
        try:
            for key, x in data.items():
                out[key] = tree(x, active)
        except Refusal as r:
            r.segments.append(f".{key}")
            raise
        data_tree = _str_dict_tree(out)
    else:  # a RootModel dumps its root value
        try:
            data_tree = tree(data, active)
        except Refusal as r:
            r.segments.append(".root")
            raise
    active.discard(id(v))
    return {TAG_KEY: "pydantic", "type": ref, "data": data_tree}
