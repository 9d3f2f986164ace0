"""Faithful JSON storage for workflow arguments and step inputs/outputs.

Values are stored as compact JSON text. JSON-native values (``None``, ``bool``, ``int``,
finite ``float``, ``str``, lists, dicts with ``str`` keys) are written as they are; every other
supported value becomes a tagged object ``{"__durable__": "<kind>", ...}``:

==============  ===========================================================================
kind            payload
==============  ===========================================================================
``tuple``       ``"items": [...]``
``set``         ``"items": [...]`` (sorted by encoded text, so the output is deterministic)
``frozenset``   ``"items": [...]`` (sorted likewise)
``dict``        ``"items": [[key, value], ...]`` (non-``str`` keys, or the tag key as a key)
``bytes``       ``"b64": "..."``; ``bytearray`` likewise
``int``         ``"hex": "-1f..."`` (only ints too large for a safe decimal literal)
``float``       ``"value": "nan" | "inf" | "-inf"``
``complex``     ``"real": float, "imag": float``
``datetime``    ``"value": isoformat, "tz": TZ, ["fold": 1]``; ``time`` likewise
``date``        ``"value": isoformat``
``timedelta``   ``"days", "seconds", "microseconds"``
``uuid``        ``"value": "..."``; ``decimal`` likewise (``str(d)``, exponent kept)
``path``        ``"type": "PurePosixPath" | "PosixPath" | ..., "value": "..."``
``enum``        ``"type": "module:Qual", "value": member value``
``dataclass``   ``"type": "module:Qual", "fields": {name: value}``
``namedtuple``  ``"type": "module:Qual", "items": [...]``
``pydantic``    ``"type": "module:Qual", "data": model_dump(mode="python")``
==============  ===========================================================================

``TZ`` is ``null``, ``{"offset": seconds, ["us": microseconds], ["name": str]}`` for a
``datetime.timezone`` or ``{"zone": key}`` for a ``zoneinfo.ZoneInfo``.

:func:`encode` proves every value it accepts: it reads the text back and compares the result
with the original (types included, recursively) and raises :class:`SerializationError` on the
first run if anything would change. Decoding never guesses: unknown tags, types that cannot be
imported or that are not of the tagged kind raise :class:`SerializationError` too.

Not stored: pydantic private attributes (read back at their defaults) and which pydantic
fields were explicitly set. Refused: NaN inside sets or dict keys and identity-hashed objects
in sets (neither is found again after a round trip), subclasses of the builtin types, and
classes that cannot be imported by ``module:qualname``.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib
import inspect
import json
import json.encoder
import pathlib
import sys
import types
import typing
import uuid
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, TypeVar, cast

from durable_core.errors import SerializationError

__all__ = [
    "TAG_KEY",
    "convert",
    "decode",
    "decode_arguments",
    "encode",
    "encode_arguments",
]

T = TypeVar("T")

TAG_KEY = "__durable__"
"""The reserved key that marks a tagged (non JSON-native) value in stored JSON."""

_TAG = TAG_KEY

# Ints at or beyond this magnitude are stored as hex: 2**2000 has 603 decimal digits, below the
# smallest limit ``sys.set_int_max_str_digits`` accepts (640), so plain literals always parse.
_INT_LIMIT = 1 << 2000

_SUPPORTED = (
    "None, bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset, "
    "datetime, date, time, timedelta, UUID, Decimal, pathlib paths, Enum members, dataclasses, "
    "NamedTuples and pydantic models"
)


# --------------------------------------------------------------------------------------------
# JSON text
# --------------------------------------------------------------------------------------------


def _make_json_encoder(ensure_ascii: bool) -> Callable[[Any], str]:
    encoder = json.JSONEncoder(
        ensure_ascii=ensure_ascii, separators=(",", ":"), allow_nan=False, check_circular=False
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is not None:
        # Calling the C encoder directly skips JSONEncoder.encode's per-call set-up (~1 us).
        quote = (
            json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
        )
        try:
            c_encode = make(None, encoder.default, quote, None, ":", ",", False, False, False)

            def fast(obj: Any) -> str:
                return "".join(c_encode(obj, 0))

            sample = {"a": [1, 2.5, None, True, "\u00e9"]}
            if fast(sample) == encoder.encode(sample):
                return fast
        except Exception:  # pragma: no cover - an interpreter without the C accelerator
            pass
    return encoder.encode  # pragma: no cover


_json_text = _make_json_encoder(ensure_ascii=False)
_json_text_ascii = _make_json_encoder(ensure_ascii=True)


def _to_text(tree: Any) -> str:
    """Dump a JSON-native tree; escape everything if it holds text UTF-8 cannot carry."""
    text = _json_text(tree)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: \\u-escapes keep the text storable
            text = _json_text_ascii(tree)
    return text


# --------------------------------------------------------------------------------------------
# Internal errors (turned into SerializationError at the public boundary)
# --------------------------------------------------------------------------------------------


class _Problem(Exception):
    """A problem inside a value; containers append path segments while it unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []

    def path(self, root: str) -> str:
        return root + "".join(reversed(self.segments))


class _Refusal(_Problem):
    """The value cannot be encoded."""


class _Mismatch(_Problem):
    """The value would not read back identical."""


class _DecodeError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _type_name(t: Any) -> str:
    if not isinstance(t, type):
        return repr(t)
    module = getattr(t, "__module__", None)
    qualname = getattr(t, "__qualname__", t.__name__)
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def _short(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{_type_name(type(value))} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# Fast path: JSON natives
# --------------------------------------------------------------------------------------------


def _is_native(v: Any) -> bool:
    """True if ``v`` is made only of values JSON stores exactly as they are."""
    t = type(v)
    if t is str or t is bool or v is None:
        return True
    if t is int:
        return -_INT_LIMIT < v < _INT_LIMIT  # type: ignore[no-any-return]
    if t is float:
        return v - v == 0.0  # type: ignore[no-any-return]  # False for nan and +-inf
    if t is dict:
        for k, x in v.items():  # noqa: SIM110 - an explicit loop is faster than all()
            if type(k) is not str or k == _TAG or not _is_native(x):
                return False
        return True
    if t is list:
        for x in v:  # noqa: SIM110
            if not _is_native(x):
                return False
        return True
    return False


def _native_or_false(v: Any) -> bool:
    try:
        return _is_native(v)
    except RecursionError:  # deeply nested or circular: let the slow path explain
        return False


# --------------------------------------------------------------------------------------------
# Encoding: value -> JSON-native tree
# --------------------------------------------------------------------------------------------

_TypeInfo = tuple[str, tuple[tuple[str, bool], ...]]
_type_refs: dict[type, str] = {}
_dataclass_infos: dict[type, _TypeInfo] = {}


def _type_ref(cls: type, kind: str) -> str:
    """``module:qualname`` for a class that can be imported back, else refuse."""
    ref = _type_refs.get(cls)
    if ref is not None:
        return ref
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None)
    name = _type_name(cls)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise _Refusal(f"{kind} {name} has no module and qualified name to import it by")
    if "<locals>" in qualname:
        raise _Refusal(
            f"{kind} {name} is defined inside a function, so it cannot be imported when the "
            "value is read back; define it at module level"
        )
    found: Any = sys.modules.get(module)
    if found is None:
        try:
            found = importlib.import_module(module)
        except Exception:
            raise _Refusal(f"{kind} {name}: module {module!r} cannot be imported") from None
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not cls:
        raise _Refusal(
            f"{kind} {name} is not importable as {module}:{qualname} (that name does not lead "
            "back to this class), so it cannot be read back"
        )
    ref = f"{module}:{qualname}"
    _type_refs[cls] = ref
    return ref


def _enter(v: object, active: set[int]) -> None:
    key = id(v)
    if key in active:
        raise _Refusal(f"circular reference: this {_type_name(type(v))} contains itself")
    active.add(key)


def _tree(v: Any, active: set[int]) -> Any:
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        if -_INT_LIMIT < v < _INT_LIMIT:
            return v
        return {_TAG: "int", "hex": format(v, "x")}
    if t is float:
        if v - v == 0.0:
            return v
        return {_TAG: "float", "value": "nan" if v != v else ("inf" if v > 0 else "-inf")}
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
            out.append(_tree(x, active))
    except _Refusal as r:
        r.segments.append(f"[{i}]")
        raise
    active.discard(id(v))
    return out


def _str_dict_tree(d: dict[str, Any]) -> Any:
    """Wrap an already-encoded str-keyed dict if one of its keys is the tag key."""
    if _TAG in d:
        return {_TAG: "dict", "items": [[k, x] for k, x in d.items()]}
    return d


def _tree_list(v: list[Any], active: set[int]) -> Any:
    return _tree_items(v, active)


def _tree_tuple(v: tuple[Any, ...], active: set[int]) -> Any:
    return {_TAG: "tuple", "items": _tree_items(v, active)}


def _tree_dict(v: dict[Any, Any], active: set[int]) -> Any:
    _enter(v, active)
    k: Any = None
    plain = all(type(k) is str for k in v) and _TAG not in v
    if plain:
        out: dict[str, Any] = {}
        try:
            for k, x in v.items():
                out[k] = _tree(x, active)
        except _Refusal as r:
            r.segments.append(f"[{_short(k)}]")
            raise
        active.discard(id(v))
        return out
    pairs: list[list[Any]] = []
    in_key = True
    try:
        for k, x in v.items():
            in_key = True
            key_tree = _tree(k, active)
            in_key = False
            pairs.append([key_tree, _tree(x, active)])
    except _Refusal as r:
        r.segments.append(f"<key {_short(k)}>" if in_key else f"[{_short(k)}]")
        raise
    active.discard(id(v))
    return {_TAG: "dict", "items": pairs}


def _tree_set(v: set[Any] | frozenset[Any], active: set[int]) -> Any:
    _enter(v, active)
    encoded: list[tuple[str, Any]] = []
    x: Any = None
    try:
        for x in v:
            item = _tree(x, active)
            encoded.append((_json_text(item), item))
    except _Refusal as r:
        r.segments.append(f"<item {_short(x)}>")
        raise
    active.discard(id(v))
    encoded.sort(key=lambda pair: pair[0])
    kind = "set" if type(v) is set else "frozenset"
    return {_TAG: kind, "items": [item for _, item in encoded]}


def _tree_bytes(v: bytes | bytearray, active: set[int]) -> Any:
    kind = "bytes" if type(v) is bytes else "bytearray"
    return {_TAG: kind, "b64": base64.b64encode(v).decode("ascii")}


def _tree_complex(v: complex, active: set[int]) -> Any:
    return {_TAG: "complex", "real": _tree(v.real, active), "imag": _tree(v.imag, active)}


def _tz_tree(tz: Any) -> Any:
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
            raise _Refusal("a ZoneInfo loaded from a file has no key to store it by")
        return {"zone": tz.key}
    raise _Refusal(
        f"tzinfo of type {_type_name(type(tz))} is not supported; use datetime.timezone or "
        "zoneinfo.ZoneInfo"
    )


def _tree_datetime(v: datetime | time, active: set[int]) -> Any:
    kind = "datetime" if type(v) is datetime else "time"
    out = {_TAG: kind, "value": v.isoformat(), "tz": _tz_tree(v.tzinfo)}
    if v.fold:
        out["fold"] = 1
    return out


def _tree_date(v: date, active: set[int]) -> Any:
    return {_TAG: "date", "value": v.isoformat()}


def _tree_timedelta(v: timedelta, active: set[int]) -> Any:
    return {_TAG: "timedelta", "days": v.days, "seconds": v.seconds, "microseconds": v.microseconds}


def _tree_uuid(v: uuid.UUID, active: set[int]) -> Any:
    return {_TAG: "uuid", "value": str(v)}


def _tree_decimal(v: Decimal, active: set[int]) -> Any:
    return {_TAG: "decimal", "value": str(v)}


_PATH_TYPES: dict[str, type[pathlib.PurePath]] = {
    cls.__name__: cls
    for cls in (
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
        pathlib.PosixPath,
        pathlib.WindowsPath,
    )
}


def _tree_path(v: pathlib.PurePath, active: set[int]) -> Any:
    return {_TAG: "path", "type": type(v).__name__, "value": str(v)}


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
    **{cls: _tree_path for cls in _PATH_TYPES.values()},
}


def _dataclass_info(cls: type) -> _TypeInfo:
    info = _dataclass_infos.get(cls)
    if info is None:
        ref = _type_ref(cls, "dataclass")
        fields = tuple((f.name, f.init) for f in dataclasses.fields(cls))
        info = (ref, fields)
        _dataclass_infos[cls] = info
    return info


def _pydantic_base() -> Any:
    """``pydantic.BaseModel`` if pydantic has been imported, else None (never imports it)."""
    module = sys.modules.get("pydantic")
    return getattr(module, "BaseModel", None) if module is not None else None


def _tree_other(v: Any, active: set[int]) -> Any:
    t = type(v)
    if isinstance(v, enum.Enum):
        ref = _type_ref(t, "enum")
        try:
            value = _tree(v.value, active)
        except _Refusal as r:
            r.segments.append(".value")
            raise
        return {_TAG: "enum", "type": ref, "value": value}
    if hasattr(t, "__dataclass_fields__"):
        ref, fields = _dataclass_info(t)
        _enter(v, active)
        out: dict[str, Any] = {}
        name = ""
        try:
            for name, _init in fields:
                try:
                    x = getattr(v, name)
                except AttributeError:
                    raise _Refusal(f"field {name!r} of {_type_name(t)} is not set") from None
                out[name] = _tree(x, active)
        except _Refusal as r:
            r.segments.append(f".{name}")
            raise
        active.discard(id(v))
        return {_TAG: "dataclass", "type": ref, "fields": _str_dict_tree(out)}
    if isinstance(v, tuple) and hasattr(t, "_fields") and hasattr(t, "_make"):
        ref = _type_ref(t, "NamedTuple")
        names: tuple[str, ...] = t._fields
        _enter(v, active)
        items: list[Any] = []
        i = 0
        try:
            for i, x in enumerate(v):  # noqa: B007 - i is read by the handler
                items.append(_tree(x, active))
        except _Refusal as r:
            r.segments.append(f".{names[i]}" if i < len(names) else f"[{i}]")
            raise
        active.discard(id(v))
        return {_TAG: "namedtuple", "type": ref, "items": items}
    base = _pydantic_base()
    if base is not None and isinstance(v, base):
        return _tree_pydantic(v, active)
    raise _Refusal(f"unsupported type {_type_name(t)} (supported: {_SUPPORTED})")


_pydantic_by_name: bool | None = None


def _pydantic_validate_by_name(cls: Any) -> bool:
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
    ref = _type_ref(t, "pydantic model")
    by_alias = not _pydantic_validate_by_name(t)
    try:
        data = v.model_dump(mode="python", round_trip=True, by_alias=by_alias, warnings=False)
    except Exception as exc:
        raise _Refusal(f"{_type_name(t)}.model_dump() failed: {type(exc).__name__}: {exc}") from exc
    _enter(v, active)
    if type(data) is dict and all(type(k) is str for k in data):
        out: dict[str, Any] = {}
        key = ""
        try:
            for key, x in data.items():
                out[key] = _tree(x, active)
        except _Refusal as r:
            r.segments.append(f".{key}")
            raise
        tree = _str_dict_tree(out)
    else:  # a RootModel dumps its root value
        try:
            tree = _tree(data, active)
        except _Refusal as r:
            r.segments.append(".root")
            raise
    active.discard(id(v))
    return {_TAG: "pydantic", "type": ref, "data": tree}


# --------------------------------------------------------------------------------------------
# Decoding: tagged objects -> values (json object_hook, bottom-up)
# --------------------------------------------------------------------------------------------

_MISSING: Any = object()
_resolved: dict[str, object] = {}


def _get(o: dict[str, Any], key: str, typ: type[T]) -> T:
    x = o.get(key, _MISSING)
    if type(x) is not typ:
        what = "is missing" if x is _MISSING else f"is a {_type_name(type(x))}"
        raise _DecodeError(f"{o[_TAG]!r} object: {key!r} {what}, expected {typ.__name__}")
    return x


def _resolve(o: dict[str, Any], kind: str, check: Callable[[Any], bool]) -> Any:
    ref = _get(o, "type", str)
    found: Any = _resolved.get(ref)
    if found is None:
        module, sep, qualname = ref.partition(":")
        parts = qualname.split(".")
        if not sep or not module or not all(p.isidentifier() for p in parts):
            raise _DecodeError(f"{o[_TAG]!r} object names an invalid type {ref!r}")
        if any(p.startswith("__") and p.endswith("__") for p in parts):
            raise _DecodeError(f"{o[_TAG]!r} object names a dunder attribute in {ref!r}")
        try:
            found = importlib.import_module(module)
        except Exception as exc:
            raise _DecodeError(
                f"{o[_TAG]!r} object names type {ref!r} but module {module!r} cannot be "
                f"imported ({type(exc).__name__}: {exc})"
            ) from exc
        for part in parts:
            try:
                found = getattr(found, part)
            except AttributeError as exc:
                raise _DecodeError(
                    f"{o[_TAG]!r} object names type {ref!r}, which does not exist"
                ) from exc
        _resolved[ref] = found
    if not check(found):  # checked on every use: one name may appear under several tags
        described = (
            f"the class {_type_name(found)}"
            if isinstance(found, type)
            else f"a {_type_name(type(found))}"
        )
        raise _DecodeError(f"{o[_TAG]!r} object names {ref!r}, which is {described}, not {kind}")
    return found


def _dec_items(o: dict[str, Any]) -> list[Any]:
    return _get(o, "items", list)


def _dec_tuple(o: dict[str, Any]) -> object:
    return tuple(_dec_items(o))


def _dec_set(o: dict[str, Any]) -> object:
    return set(_dec_items(o))


def _dec_frozenset(o: dict[str, Any]) -> object:
    return frozenset(_dec_items(o))


def _dec_dict(o: dict[str, Any]) -> object:
    out: dict[Any, Any] = {}
    for pair in _dec_items(o):
        if type(pair) is not list or len(pair) != 2:
            raise _DecodeError("'dict' object: each item must be a [key, value] pair")
        out[pair[0]] = pair[1]
    return out


def _dec_bytes(o: dict[str, Any]) -> object:
    data = base64.b64decode(_get(o, "b64", str), validate=True)
    return data if o[_TAG] == "bytes" else bytearray(data)


def _dec_int(o: dict[str, Any]) -> object:
    return int(_get(o, "hex", str), 16)


_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _dec_float(o: dict[str, Any]) -> object:
    value = _FLOATS.get(_get(o, "value", str))
    if value is None:
        raise _DecodeError(f"'float' object: unknown value {o['value']!r}")
    return value


def _dec_complex(o: dict[str, Any]) -> object:
    real, imag = o.get("real"), o.get("imag")
    if type(real) is not float or type(imag) is not float:
        raise _DecodeError("'complex' object: 'real' and 'imag' must be floats")
    return complex(real, imag)


def _dec_tz(o: dict[str, Any]) -> Any:
    tz = o.get("tz")
    if tz is None:
        return None
    if type(tz) is dict:
        if "zone" in tz and type(tz["zone"]) is str:
            return zoneinfo.ZoneInfo(tz["zone"])
        seconds, micro, name = tz.get("offset"), tz.get("us", 0), tz.get("name")
        if type(seconds) is int and type(micro) is int and (name is None or type(name) is str):
            offset = timedelta(seconds=seconds, microseconds=micro)
            return timezone(offset) if name is None else timezone(offset, name)
    raise _DecodeError(f"{o[_TAG]!r} object: invalid 'tz' {tz!r}")


def _dec_datetime(o: dict[str, Any]) -> object:
    fold = o.get("fold", 0)
    if fold not in (0, 1):
        raise _DecodeError(f"{o[_TAG]!r} object: invalid 'fold' {fold!r}")
    cls = datetime if o[_TAG] == "datetime" else time
    return cls.fromisoformat(_get(o, "value", str)).replace(tzinfo=_dec_tz(o), fold=fold)


def _dec_date(o: dict[str, Any]) -> object:
    return date.fromisoformat(_get(o, "value", str))


def _dec_timedelta(o: dict[str, Any]) -> object:
    return timedelta(
        days=_get(o, "days", int),
        seconds=_get(o, "seconds", int),
        microseconds=_get(o, "microseconds", int),
    )


def _dec_uuid(o: dict[str, Any]) -> object:
    return uuid.UUID(_get(o, "value", str))


def _dec_decimal(o: dict[str, Any]) -> object:
    return Decimal(_get(o, "value", str))


def _dec_path(o: dict[str, Any]) -> object:
    cls = _PATH_TYPES.get(_get(o, "type", str))
    if cls is None:
        raise _DecodeError(f"'path' object: unknown path type {o['type']!r}")
    return cls(_get(o, "value", str))


def _is_enum_type(x: Any) -> bool:
    return isinstance(x, type) and issubclass(x, enum.Enum)


def _is_dataclass_type(x: Any) -> bool:
    return isinstance(x, type) and dataclasses.is_dataclass(x)


def _is_namedtuple_type(x: Any) -> bool:
    return (
        isinstance(x, type)
        and issubclass(x, tuple)
        and hasattr(x, "_fields")
        and hasattr(x, "_make")
    )


def _is_pydantic_type(x: Any) -> bool:
    if not isinstance(x, type):
        return False
    try:
        import pydantic
    except ImportError:
        return False
    return issubclass(x, pydantic.BaseModel)


def _dec_enum(o: dict[str, Any]) -> object:
    cls = _resolve(o, "an Enum class", _is_enum_type)
    if "value" not in o:
        raise _DecodeError("'enum' object: 'value' is missing")
    return cls(o["value"])


def _dec_dataclass(o: dict[str, Any]) -> object:
    cls = _resolve(o, "a dataclass", _is_dataclass_type)
    stored = _get(o, "fields", dict)
    init: dict[str, Any] = {}
    late: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in stored:
            (init if f.init else late)[f.name] = stored[f.name]
    unknown = stored.keys() - init.keys() - late.keys()
    if unknown:
        raise _DecodeError(
            f"'dataclass' object: stored fields {sorted(unknown)!r} are not fields of "
            f"{_type_name(cls)}"
        )
    obj = cls(**init)
    for name, x in late.items():
        object.__setattr__(obj, name, x)
    return obj


def _dec_namedtuple(o: dict[str, Any]) -> object:
    cls = _resolve(o, "a NamedTuple class", _is_namedtuple_type)
    return cls._make(_dec_items(o))


def _dec_pydantic(o: dict[str, Any]) -> object:
    cls = _resolve(o, "a pydantic BaseModel subclass", _is_pydantic_type)
    if "data" not in o:
        raise _DecodeError("'pydantic' object: 'data' is missing")
    if _pydantic_validate_by_name(cls):
        return cls.model_validate(o["data"], by_name=True)
    return cls.model_validate(o["data"])  # pragma: no cover


_DECODERS: dict[str, Callable[[dict[str, Any]], object]] = {
    "tuple": _dec_tuple,
    "set": _dec_set,
    "frozenset": _dec_frozenset,
    "dict": _dec_dict,
    "bytes": _dec_bytes,
    "bytearray": _dec_bytes,
    "int": _dec_int,
    "float": _dec_float,
    "complex": _dec_complex,
    "datetime": _dec_datetime,
    "time": _dec_datetime,
    "date": _dec_date,
    "timedelta": _dec_timedelta,
    "uuid": _dec_uuid,
    "decimal": _dec_decimal,
    "path": _dec_path,
    "enum": _dec_enum,
    "dataclass": _dec_dataclass,
    "namedtuple": _dec_namedtuple,
    "pydantic": _dec_pydantic,
}


def _object_hook(o: dict[str, Any]) -> object:
    if _TAG not in o:
        return o
    kind = o[_TAG]
    decoder = _DECODERS.get(kind) if type(kind) is str else None
    if decoder is None:
        raise _DecodeError(f"unknown tag {_TAG!r}: {kind!r}")
    try:
        return decoder(o)
    except _DecodeError:
        raise
    except Exception as exc:
        raise _DecodeError(
            f"cannot rebuild {kind!r} object {_short(o, 200)}: {type(exc).__name__}: {exc}"
        ) from exc


def _reject_constant(name: str) -> object:
    raise _DecodeError(f"stored text contains {name}, which is not valid JSON")


_plain_decoder = json.JSONDecoder(parse_constant=_reject_constant)
_tagged_decoder = json.JSONDecoder(parse_constant=_reject_constant, object_hook=_object_hook)


def _decode_text(text: str) -> Any:
    # "\u" too: a hand-written key could spell the tag with escapes.
    if _TAG in text or "\\u" in text:
        return _tagged_decoder.decode(text)
    return _plain_decoder.decode(text)


# --------------------------------------------------------------------------------------------
# Verification: is the decoded value structurally identical to the original?
# --------------------------------------------------------------------------------------------


def _mismatch(a: object, b: object) -> _Mismatch:
    return _Mismatch(f"stored {_short(a)} but would read back {_short(b)}")


def _same(a: Any, b: Any) -> None:
    t = type(a)
    if type(b) is not t:
        raise _Mismatch(
            f"stored a {_type_name(t)} but would read back a {_type_name(type(b))} ({_short(b)})"
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
        raise _Mismatch(f"stored {len(a)} items but would read back {len(b)}")
    i = 0
    try:
        for i, x in enumerate(a):
            _same(x, b[i])
    except _Mismatch as m:
        m.segments.append(f"[{i}]")
        raise


def _same_dict(a: dict[Any, Any], b: dict[Any, Any]) -> None:
    if len(a) != len(b):
        raise _Mismatch(f"stored {len(a)} keys but would read back {len(b)}")
    for (ka, xa), (kb, xb) in zip(a.items(), b.items(), strict=True):
        try:
            _same(ka, kb)
        except _Mismatch as m:
            m.segments.append(f"<key {_short(ka)}>")
            raise
        try:
            _same(xa, xb)
        except _Mismatch as m:
            m.segments.append(f"[{_short(ka)}]")
            raise


def _same_set(a: set[Any] | frozenset[Any], b: set[Any] | frozenset[Any]) -> None:
    if len(a) != len(b):
        raise _Mismatch(f"stored {len(a)} items but would read back {len(b)}")
    by_item = {x: x for x in b}
    for x in a:
        y = by_item.get(x, _MISSING)
        if y is _MISSING:
            raise _Mismatch(f"item {_short(x)} would not be found in the set read back")
        try:
            _same(x, y)
        except _Mismatch as m:
            m.segments.append(f"<item {_short(x)}>")
            raise


def _same_complex(a: complex, b: complex) -> None:
    _same_float(a.real, b.real)
    _same_float(a.imag, b.imag)


def _same_datetime(a: datetime | time, b: datetime | time) -> None:
    if (
        a.replace(tzinfo=None) != b.replace(tzinfo=None)
        or a.fold != b.fold
        or _tz_tree(a.tzinfo) != _tz_tree(b.tzinfo)
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
    **{cls: _same_eq for cls in _PATH_TYPES.values()},
}


def _same_attributes(a: Any, b: Any, names: Iterable[str]) -> None:
    name = ""
    try:
        for name in names:
            _same(getattr(a, name), getattr(b, name, _MISSING))
    except _Mismatch as m:
        m.segments.append(f".{name}")
        raise


def _same_other(a: Any, b: Any) -> None:
    t = type(a)
    if isinstance(a, enum.Enum):
        if a is not b:
            raise _mismatch(a, b)
    elif hasattr(t, "__dataclass_fields__"):
        _same_attributes(a, b, (name for name, _ in _dataclass_info(t)[1]))
    elif isinstance(a, tuple) and hasattr(t, "_fields"):
        _same_attributes(a, b, t._fields)
    elif (base := _pydantic_base()) is not None and isinstance(a, base):
        _same_attributes(a, b, t.model_fields)
        extra_a, extra_b = a.__pydantic_extra__, b.__pydantic_extra__
        if extra_a or extra_b:
            _same_attributes(a, b, {**(extra_a or {}), **(extra_b or {})})
    else:  # pragma: no cover - _tree refuses every other type
        _same_eq(a, b)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def _encode_checked(what: str, parts: list[tuple[str, Any]], wrap: bool) -> str:
    """Slow path: tag, dump, read back and compare. ``parts`` are ``(root, value)`` pairs."""
    root = parts[0][0]
    try:
        trees: dict[str, Any] = {}
        for root, value in parts:
            trees[root] = _tree(value, set())
        text = _to_text(trees if wrap else trees[root])
        decoded = _decode_text(text)
        for root, value in parts:
            _same(value, decoded[root] if wrap else decoded)
    except _Refusal as r:
        raise SerializationError(f"cannot encode {what}: {r.path(root)}: {r.reason}") from (
            r.__cause__
        )
    except _Mismatch as m:
        raise SerializationError(
            f"cannot encode {what}: {m.path(root)} would not read back as stored: {m.reason}"
        ) from None
    except _DecodeError as d:
        raise SerializationError(
            f"cannot encode {what}: {root} would not read back: {d.reason}"
        ) from d.__cause__
    except RecursionError as exc:
        raise SerializationError(f"cannot encode {what}: {root} is nested too deeply") from exc
    except Exception as exc:
        raise SerializationError(
            f"cannot encode {what}: {root}: {type(exc).__name__}: {exc}"
        ) from exc
    return text


def encode(value: object, *, what: str = "value") -> str:
    """Encode ``value`` as compact JSON text that :func:`decode` turns back into an equal value.

    Raises :class:`SerializationError` naming ``what``, the path inside the value and the
    offending type if any part cannot be stored or would not read back identical.
    """
    if _native_or_false(value):
        return _to_text(value)
    return _encode_checked(what, [("value", value)], wrap=False)


def decode(text: str, *, what: str = "value") -> object:
    """Decode text written by :func:`encode`; raise :class:`SerializationError` if it is bad."""
    if not isinstance(text, str):
        raise SerializationError(
            f"cannot decode {what}: expected stored text (str), got {_type_name(type(text))}"
        )
    try:
        return _decode_text(text)
    except _DecodeError as exc:
        raise SerializationError(f"cannot decode {what}: {exc.reason}") from exc.__cause__
    except json.JSONDecodeError as exc:
        raise SerializationError(
            f"cannot decode {what}: stored text is not valid JSON: {exc}"
        ) from exc
    except RecursionError as exc:
        raise SerializationError(f"cannot decode {what}: stored text is nested too deeply") from exc
    except Exception as exc:  # pragma: no cover - defensive
        raise SerializationError(f"cannot decode {what}: {type(exc).__name__}: {exc}") from exc


def encode_arguments(args: tuple[object, ...], kwargs: dict[str, object], *, what: str) -> str:
    """Encode call arguments as ``{"args": [...], "kwargs": {...}}``, deterministically.

    The same arguments always give the same text, in any process: dict order is kept and set
    items are sorted by their encoded text.
    """
    if not isinstance(args, tuple | list):
        raise SerializationError(
            f"cannot encode {what}: args must be a tuple, got {_type_name(type(args))}"
        )
    if not isinstance(kwargs, dict) or not all(type(k) is str for k in kwargs):
        raise SerializationError(f"cannot encode {what}: kwargs must be a dict with str keys")
    arg_list = list(args)
    if _native_or_false(arg_list) and _native_or_false(kwargs):
        return _to_text({"args": arg_list, "kwargs": kwargs})
    return _encode_checked(what, [("args", arg_list), ("kwargs", kwargs)], wrap=True)


def decode_arguments(text: str, *, what: str) -> tuple[tuple[object, ...], dict[str, object]]:
    """Decode text written by :func:`encode_arguments` into ``(args, kwargs)``."""
    obj = decode(text, what=what)
    if (
        type(obj) is not dict
        or obj.keys() != {"args", "kwargs"}
        or type(obj["args"]) is not list
        or type(obj["kwargs"]) is not dict
        or not all(type(k) is str for k in obj["kwargs"])
    ):
        raise SerializationError(
            f'cannot decode {what}: stored arguments are not of the form {{"args": [...], '
            f'"kwargs": {{...}}}}: {_short(obj, 200)}'
        )
    return tuple(obj["args"]), obj["kwargs"]


# --------------------------------------------------------------------------------------------
# convert
# --------------------------------------------------------------------------------------------

_SEQUENCES = (list, tuple, set, frozenset)


def _cannot_convert(value: object, target: object, detail: str = "") -> SerializationError:
    name = _type_name(target) if isinstance(target, type) else repr(target)
    suffix = f": {detail}" if detail else ""
    return SerializationError(f"cannot convert {_type_name(type(value))} to {name}{suffix}")


def _convert_generic(value: Any, target: Any, origin: Any) -> Any:
    args = typing.get_args(target)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        for arg in args:
            if isinstance(arg, type) and typing.get_origin(arg) is None and isinstance(value, arg):
                return value
        for arg in args:
            try:
                return convert(value, arg)
            except SerializationError:
                continue
        raise _cannot_convert(value, target)
    if origin is typing.Literal:
        if any(value == arg and type(value) is type(arg) for arg in args):
            return value
        raise _cannot_convert(value, target)
    if origin is typing.Annotated:
        return convert(value, args[0])
    if origin in (list, set, frozenset) and isinstance(value, _SEQUENCES):
        item = args[0] if args else Any
        return origin(convert(x, item) for x in value)
    if origin is tuple and isinstance(value, _SEQUENCES):
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            item = args[0] if args else Any
            return tuple(convert(x, item) for x in value)
        if args == ((),):
            args = ()
        items = list(value)
        if len(items) != len(args):
            raise _cannot_convert(value, target, f"expected {len(args)} items, got {len(items)}")
        return tuple(convert(x, arg) for x, arg in zip(items, args, strict=True))
    if origin is dict and isinstance(value, Mapping):
        key_type, value_type = args if len(args) == 2 else (Any, Any)
        return {convert(k, key_type): convert(x, value_type) for k, x in value.items()}
    if (
        isinstance(origin, type)
        and origin not in (list, set, frozenset, tuple, dict)
        and isinstance(value, origin)
    ):
        return value
    raise _cannot_convert(value, target)


def convert(value: object, type_: type[T]) -> T:
    """Return ``value`` as a ``type_``, as :meth:`handle.output` promises.

    Instances pass through; dicts become dataclasses or pydantic models; lists, tuples and sets
    convert between each other; parametrised builtins (``list[User]``), unions and ``Any`` are
    understood. Anything else raises :class:`SerializationError`.
    """
    target: Any = type_
    if target is Any or target is object:
        return cast(T, value)
    origin = typing.get_origin(target)
    if origin is not None:
        return cast(T, _convert_generic(value, target, origin))
    if not isinstance(target, type):
        raise _cannot_convert(value, target, "not a type")
    if isinstance(value, target):
        return cast(T, value)
    base = _pydantic_base()
    if base is not None and issubclass(target, base):
        model: Any = target
        try:
            if isinstance(value, base):
                return cast(T, model.model_validate(value.model_dump()))
            return cast(T, model.model_validate(value, from_attributes=True))
        except Exception as exc:
            raise _cannot_convert(value, target, str(exc)) from exc
    source: Any = value
    try:
        if dataclasses.is_dataclass(target) and isinstance(source, Mapping):
            return cast(T, target(**source))
        if issubclass(target, tuple) and hasattr(target, "_fields"):
            if isinstance(source, Mapping):
                return cast(T, target(**source))
            if isinstance(source, list | tuple):
                return cast(T, target(*source))
        elif issubclass(target, enum.Enum) or (
            target in _SEQUENCES and isinstance(source, _SEQUENCES)
        ):
            return cast(T, target(source))
        elif target is dict and isinstance(source, Mapping):
            return cast(T, dict(source))
        elif target is float and type(source) is int:
            return cast(T, float(source))
    except Exception as exc:
        raise _cannot_convert(value, target, f"{type(exc).__name__}: {exc}") from exc
    raise _cannot_convert(value, target)
