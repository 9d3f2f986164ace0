"""Decoding: stored JSON text back into values, tagged objects rebuilt bottom-up.

Type names in stored text are resolved by :func:`durable_core.codec.registry.resolve`, which
never imports a module the text names unless it is registered or allowed.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import uuid
import zoneinfo
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, TypeVar

from .encode import PATH_TYPES, pydantic_validate_by_name
from .registry import entry_named, pydantic_base, resolve
from .text import TAG_KEY, DecodeProblem, reject_constant, short, type_name

__all__ = ["MISSING", "decode_text"]

T = TypeVar("T")

MISSING: Any = object()


def _get(o: dict[str, Any], key: str, typ: type[T]) -> T:
    x = o.get(key, MISSING)
    if type(x) is not typ:
        what = "is missing" if x is MISSING else f"is a {type_name(type(x))}"
        raise DecodeProblem(f"{o[TAG_KEY]!r} object: {key!r} {what}, expected {typ.__name__}")
    return x


def _resolve(o: dict[str, Any], kind: str, check: Callable[[Any], bool]) -> Any:
    ref = _get(o, "type", str)
    found = resolve(ref, o[TAG_KEY])
    if not check(found):  # checked on every use: one name may appear under several tags
        described = (
            f"the class {type_name(found)}"
            if isinstance(found, type)
            else f"a {type_name(type(found))}"
        )
        raise DecodeProblem(
            f"{o[TAG_KEY]!r} object names {ref!r}, which is {described}, not {kind}"
        )
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
            raise DecodeProblem("'dict' object: each item must be a [key, value] pair")
        out[pair[0]] = pair[1]
    return out


def _dec_bytes(o: dict[str, Any]) -> object:
    data = base64.b64decode(_get(o, "b64", str), validate=True)
    return data if o[TAG_KEY] == "bytes" else bytearray(data)


def _dec_int(o: dict[str, Any]) -> object:
    return int(_get(o, "hex", str), 16)


_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _dec_float(o: dict[str, Any]) -> object:
    value = _FLOATS.get(_get(o, "value", str))
    if value is None:
        raise DecodeProblem(f"'float' object: unknown value {o['value']!r}")
    return value


def _dec_complex(o: dict[str, Any]) -> object:
    real, imag = o.get("real"), o.get("imag")
    if type(real) is not float or type(imag) is not float:
        raise DecodeProblem("'complex' object: 'real' and 'imag' must be floats")
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
    raise DecodeProblem(f"{o[TAG_KEY]!r} object: invalid 'tz' {tz!r}")


def _dec_datetime(o: dict[str, Any]) -> object:
    fold = o.get("fold", 0)
    if fold not in (0, 1):
        raise DecodeProblem(f"{o[TAG_KEY]!r} object: invalid 'fold' {fold!r}")
    cls = datetime if o[TAG_KEY] == "datetime" else time
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
    cls = PATH_TYPES.get(_get(o, "type", str))
    if cls is None:
        raise DecodeProblem(f"'path' object: unknown path type {o['type']!r}")
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
    base = pydantic_base()
    return isinstance(x, type) and base is not None and issubclass(x, base)


def _dec_enum(o: dict[str, Any]) -> object:
    cls = _resolve(o, "an Enum class", _is_enum_type)
    if "value" not in o:
        raise DecodeProblem("'enum' object: 'value' is missing")
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
        raise DecodeProblem(
            f"'dataclass' object: stored fields {sorted(unknown)!r} are not fields of "
            f"{type_name(cls)}"
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
        raise DecodeProblem("'pydantic' object: 'data' is missing")
    if pydantic_validate_by_name(cls):
        return cls.model_validate(o["data"], by_name=True)
    return cls.model_validate(o["data"])  # pragma: no cover


def _dec_custom(o: dict[str, Any]) -> object:
    ref = _get(o, "type", str)
    entry = entry_named(ref)
    if entry is None or entry.decode is None:
        raise DecodeProblem(
            f"'custom' object names type {ref!r}, which has no codec registered "
            "(register_type(cls, name, encode=..., decode=...))"
        )
    if "data" not in o:
        raise DecodeProblem("'custom' object: 'data' is missing")
    return entry.decode(o["data"])


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
    "custom": _dec_custom,
}


def _object_hook(o: dict[str, Any]) -> object:
    if TAG_KEY not in o:
        return o
    kind = o[TAG_KEY]
    decoder = _DECODERS.get(kind) if type(kind) is str else None
    if decoder is None:
        raise DecodeProblem(f"unknown tag {TAG_KEY!r}: {kind!r}")
    try:
        return decoder(o)
    except DecodeProblem:
        raise
    except Exception as exc:
        raise DecodeProblem(
            f"cannot rebuild {kind!r} object {short(o, 200)}: {type(exc).__name__}: {exc}"
        ) from exc


def _reject_constant(name: str) -> object:
    raise DecodeProblem(f"stored text contains {name}, which is not valid JSON")


_plain_decoder = json.JSONDecoder(parse_constant=reject_constant)
_tagged_decoder = json.JSONDecoder(parse_constant=reject_constant, object_hook=_object_hook)


def decode_text(text: str) -> Any:
    """Parse stored JSON text; raises :class:`DecodeProblem` or :class:`json.JSONDecodeError`."""
    # "\u" too: a hand-written key could spell the tag with escapes.
    if TAG_KEY in text or "\\u" in text:
        return _tagged_decoder.decode(text)
    return _plain_decoder.decode(text)
