"""convert: a decoded value as the type a caller annotates (``handle.output(User)``).

The work is msgspec's (:func:`msgspec.convert`, strict: no ``"12"`` to ``int``); pydantic
models are validated by pydantic itself. What is added here: instances pass through
untouched, and unions msgspec cannot tell apart (two dataclasses) are tried arm by arm.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, TypeVar, cast

import msgspec

from ..errors import SerializationError
from .registry import pydantic_base
from .text import type_name

__all__ = ["convert"]

T = TypeVar("T")


def _cannot(value: object, target: object, detail: str = "") -> SerializationError:
    name = type_name(target) if isinstance(target, type) else repr(target)
    suffix = f": {detail}" if detail else ""
    return SerializationError(f"cannot convert {type_name(type(value))} to {name}{suffix}")


def _pydantic(value: Any, target: Any) -> Any:
    base = pydantic_base()
    try:
        if isinstance(value, base):
            return target.model_validate(value.model_dump())
        return target.model_validate(value, from_attributes=True)
    except Exception as exc:
        raise _cannot(value, target, str(exc)) from exc


def _is_pydantic(target: Any) -> bool:
    base = pydantic_base()
    return base is not None and isinstance(target, type) and issubclass(target, base)


def _dec_hook(target: Any, value: Any) -> Any:
    """msgspec's hook for types it does not know: pydantic models, nested anywhere."""
    if _is_pydantic(target):
        if isinstance(value, target):
            return value
        return _pydantic(value, target)
    raise NotImplementedError(f"{type_name(target)} is not a type convert understands")


def _union_arms(value: Any, target: Any) -> Any:
    args = typing.get_args(target)
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
    raise _cannot(value, target)


def convert(value: object, type_: type[T]) -> T:
    """Return ``value`` as a ``type_``, as :meth:`handle.output` promises.

    Instances pass through; dicts become dataclasses, NamedTuples or pydantic models; lists,
    tuples and sets convert between each other; parametrised builtins (``list[User]``),
    unions, ``Literal`` and ``Any`` are understood; ``int`` widens to ``float`` but text is
    never parsed into numbers. Anything else raises :class:`SerializationError`.
    """
    target: Any = type_
    if target is Any or target is object:
        return cast(T, value)
    if isinstance(target, type) and typing.get_origin(target) is None:
        if isinstance(value, target):
            return cast(T, value)
        if _is_pydantic(target):
            return cast(T, _pydantic(value, target))
        if issubclass(target, enum.Enum):  # msgspec takes all-str or all-int enums only
            try:
                return cast(T, target(value))
            except ValueError as exc:
                raise _cannot(value, target, str(exc)) from exc
    elif typing.get_origin(target) is None and not isinstance(target, typing.TypeVar):
        raise _cannot(value, target, "not a type")
    try:
        return cast(T, msgspec.convert(value, target, dec_hook=_dec_hook))
    except msgspec.ValidationError as exc:
        raise _cannot(value, target, str(exc)) from exc
    except TypeError as exc:  # a type msgspec does not take as a whole, e.g. A | B dataclasses
        if typing.get_origin(target) in (typing.Union, types.UnionType):
            return cast(T, _union_arms(value, target))
        raise _cannot(value, target, str(exc)) from exc
