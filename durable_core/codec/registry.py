"""The registry of types: the stable names values are stored under, old names (aliases) that
still read, codecs for a user's own classes, and the modules stored data may name.

Decoding resolves a stored type name here first. A name the registry does not know is read
as ``module:qualname`` only if that module is already imported (the application's code
defined the class) or allowed with :func:`allow_modules`: stored data never makes the
process import a module it names.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import pathlib
import sys
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from ..errors import RegistrationError
from .text import DecodeProblem, Refusal, type_name

__all__ = [
    "TypeEntry",
    "allow_modules",
    "durable_type",
    "entry_for",
    "entry_named",
    "pydantic_base",
    "register_type",
    "resolve",
    "stored_name",
]

C = TypeVar("C", bound=type)

BUILTIN_TYPES: frozenset[type] = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        bytearray,
        list,
        tuple,
        dict,
        set,
        frozenset,
        datetime,
        date,
        time,
        timedelta,
        uuid.UUID,
        Decimal,
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
        pathlib.PosixPath,
        pathlib.WindowsPath,
    }
)
"""Types the codec stores by itself; they cannot be registered."""


@dataclasses.dataclass(frozen=True)
class TypeEntry:
    """A registered class: its stored name, old names, and its own codec if it has one."""

    cls: type
    name: str
    aliases: tuple[str, ...]
    encode: Callable[[Any], object] | None
    decode: Callable[[Any], object] | None


_by_class: dict[type, TypeEntry] = {}
_by_name: dict[str, TypeEntry] = {}
_allowed: set[str] = set()
_refs: dict[type, str] = {}
_resolved: dict[str, object] = {}


def pydantic_base() -> Any:
    """``pydantic.BaseModel`` if pydantic has been imported, else None (never imports it)."""
    module = sys.modules.get("pydantic")
    return getattr(module, "BaseModel", None) if module is not None else None


def _is_structured(cls: type) -> bool:
    base = pydantic_base()
    return (
        issubclass(cls, enum.Enum)
        or dataclasses.is_dataclass(cls)
        or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
        or (base is not None and issubclass(cls, base))
    )


def _same_class(a: type, b: type) -> bool:
    """The same class, or the same definition loaded again (a module reload)."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def register_type(
    cls: C,
    name: str | None = None,
    *,
    aliases: Iterable[str] = (),
    encode: Callable[[Any], object] | None = None,
    decode: Callable[[Any], object] | None = None,
) -> C:
    """Store ``cls`` under ``name`` (default ``module:qualname``) and read ``aliases`` as it.

    Dataclasses, enums, NamedTuples and pydantic models need no codec; any other class gives
    ``encode`` (instance to a storable value) and ``decode`` (that value back to an instance).
    Raises :class:`~durable_core.errors.RegistrationError` for a name another class holds.
    """
    if not isinstance(cls, type):
        raise RegistrationError(f"register_type: expected a class, got {type_name(type(cls))}")
    if cls in BUILTIN_TYPES:
        raise RegistrationError(f"register_type: {type_name(cls)} is stored by durable-core")
    if (encode is None) != (decode is None):
        raise RegistrationError(f"register_type({type_name(cls)}): give encode and decode")
    if encode is None and not _is_structured(cls):
        raise RegistrationError(
            f"register_type({type_name(cls)}): not a dataclass, enum, NamedTuple or pydantic "
            "model, so give encode= and decode= functions"
        )
    stored = name if name is not None else f"{cls.__module__}:{cls.__qualname__}"
    names = (stored, *aliases)
    for each in names:
        if not isinstance(each, str) or not each or each != each.strip():
            raise RegistrationError(f"register_type({type_name(cls)}): invalid type name {each!r}")
        held = _by_name.get(each)
        if held is not None and not _same_class(held.cls, cls):
            raise RegistrationError(
                f"register_type({type_name(cls)}): the name {each!r} is already taken by "
                f"{type_name(held.cls)}"
            )
    for old in [e for e in _by_class.values() if _same_class(e.cls, cls)]:
        del _by_class[old.cls]
        for each in (old.name, *old.aliases):
            _by_name.pop(each, None)
    entry = TypeEntry(cls, stored, tuple(aliases), encode, decode)
    _by_class[cls] = entry
    for each in names:
        _by_name[each] = entry
    _refs.clear()
    _resolved.clear()
    return cls


def durable_type(
    name: str | None = None,
    *,
    aliases: Iterable[str] = (),
    encode: Callable[[Any], object] | None = None,
    decode: Callable[[Any], object] | None = None,
) -> Callable[[C], C]:
    """Class decorator for :func:`register_type`: ``@durable_type("billing.Invoice",
    aliases=["app.models:Receipt"])`` keeps values stored under old names readable."""
    aliases = tuple(aliases)

    def declare(cls: C) -> C:
        return register_type(cls, name, aliases=aliases, encode=encode, decode=decode)

    return declare


def allow_modules(*prefixes: str) -> None:
    """Let decoding import these modules (and their submodules) when stored data names a type
    in one that is not imported yet."""
    for prefix in prefixes:
        if not isinstance(prefix, str) or not all(p.isidentifier() for p in prefix.split(".")):
            raise RegistrationError(f"allow_modules: invalid module name {prefix!r}")
        _allowed.add(prefix)


def _module_allowed(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in _allowed)


def entry_for(cls: type) -> TypeEntry | None:
    """The registration of exactly ``cls``, if any."""
    return _by_class.get(cls)


def entry_named(name: str) -> TypeEntry | None:
    """The registration a stored name or alias leads to, if any."""
    return _by_name.get(name)


def stored_name(cls: type, kind: str) -> str:
    """The name ``cls`` is stored under: its registered name, else an importable
    ``module:qualname`` (refused with :class:`Refusal` if it does not lead back to ``cls``)."""
    entry = _by_class.get(cls)
    if entry is not None:
        return entry.name
    ref = _refs.get(cls)
    if ref is not None:
        return ref
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None)
    name = type_name(cls)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise Refusal(f"{kind} {name} has no module and qualified name to import it by")
    if "<locals>" in qualname:
        raise Refusal(
            f"{kind} {name} is defined inside a function, so it cannot be found when the "
            "value is read back; define it at module level or register it with durable_type"
        )
    found: Any = sys.modules.get(module)
    if found is None:
        raise Refusal(f"{kind} {name}: module {module!r} is not imported")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not cls:
        raise Refusal(
            f"{kind} {name} is not importable as {module}:{qualname} (that name does not lead "
            "back to this class), so it cannot be read back"
        )
    ref = f"{module}:{qualname}"
    _refs[cls] = ref
    return ref


def resolve(ref: str, tag: str) -> object:
    """What a stored type name stands for: a registered name or alias, else ``module:qualname``
    in a module already imported or allowed. Raises :class:`DecodeProblem` otherwise."""
    entry = _by_name.get(ref)
    if entry is not None:
        return entry.cls
    found: Any = _resolved.get(ref)
    if found is not None:
        return found
    module, sep, qualname = ref.partition(":")
    parts = qualname.split(".")
    if (
        not sep
        or not all(p.isidentifier() for p in module.split("."))
        or not all(p.isidentifier() for p in parts)
    ):
        raise DecodeProblem(
            f"{tag!r} object names type {ref!r}, which is neither registered nor a "
            "module:qualname reference"
        )
    if any(p.startswith("__") and p.endswith("__") for p in parts):
        raise DecodeProblem(f"{tag!r} object names a dunder attribute in {ref!r}")
    found = sys.modules.get(module)
    if found is None:
        if not _module_allowed(module):
            raise DecodeProblem(
                f"{tag!r} object names type {ref!r}, which is not registered, and its module "
                f"{module!r} is not imported: stored data never imports a module by itself; "
                "import the module, declare the type with durable_type (with an alias for an "
                "old name), or allow the module with allow_modules"
            )
        try:
            found = importlib.import_module(module)
        except Exception as exc:
            raise DecodeProblem(
                f"{tag!r} object names type {ref!r} but module {module!r} cannot be "
                f"imported ({type(exc).__name__}: {exc})"
            ) from exc
    for part in parts:
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise DecodeProblem(
                f"{tag!r} object names type {ref!r}, which does not exist (a renamed class "
                "can keep its old name readable with durable_type(aliases=[...]))"
            ) from exc
    _resolved[ref] = found
    return found
