"""Named codecs: the format a value is stored in, recorded with the value.

The built-in ``json`` codec writes the JSON described in :mod:`durable_core.codec`, as every
version of durable-core has, with no marker. Any other codec's text is stored as
``@<name>:<payload>``; valid JSON never starts with ``@``, so each stored value names the
codec that reads it, whatever the process's default is when it is read. No column changes.
"""

from __future__ import annotations

import abc
import json
import re
from typing import Any

from ..errors import FrameworkError, RegistrationError, SerializationError, UnknownCodecError
from .decode import decode_text
from .encode import tree
from .text import (
    DecodeProblem,
    Mismatch,
    Refusal,
    call_text,
    native_or_false,
    short,
    to_text,
    type_name,
)
from .verify import same

__all__ = [
    "JSON",
    "Codec",
    "JsonCodec",
    "codec_named",
    "current_codec",
    "registered_codec",
    "same_stored",
    "decode",
    "decode_arguments",
    "encode",
    "encode_arguments",
    "register_codec",
    "same_arguments",
    "use_codec",
]

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MARK = "@"


class Codec(abc.ABC):
    """A storage format. ``name`` is recorded with every value it writes, so keep it stable;
    :meth:`encode` returns text (a column is text: base64 a binary format) that
    :meth:`decode` reads back. Errors should be :class:`SerializationError`."""

    name: str
    deterministic: bool = True
    """Whether a value is always written as the same text (an encrypting codec's differs
    each time: a replay compares values, not texts)."""
    seals_errors: bool = False
    """Whether its values are secret (an encrypting codec): errors are then stored with
    their message and traceback sealed by it too (:meth:`seal`, :meth:`reveal`)."""

    def seal(self, plain: str) -> str:
        """``plain`` (JSON text) made as secret as this codec's values; the payload
        :meth:`reveal` reads back. Only a codec whose ``seals_errors`` is true has one."""
        raise NotImplementedError(f"codec {self.name!r} does not seal text")

    def reveal(self, payload: str, *, what: str = "a value") -> str:
        """The text :meth:`seal` made ``payload`` of."""
        raise NotImplementedError(f"codec {self.name!r} does not seal text")

    @abc.abstractmethod
    def encode(self, value: object, *, what: str) -> str:
        """``value`` as text; ``what`` names it in errors."""

    @abc.abstractmethod
    def decode(self, text: str, *, what: str) -> object:
        """The value :meth:`encode` wrote as ``text``."""


def _encode_checked(what: str, parts: list[tuple[str, Any]], wrap: bool) -> str:
    """Tag, dump, read back and compare. ``parts`` are ``(root, value)`` pairs."""
    root = parts[0][0]
    try:
        trees: dict[str, Any] = {}
        for root, value in parts:
            trees[root] = tree(value, set())
        text = to_text(trees if wrap else trees[root])
        decoded = decode_text(text)
        for root, value in parts:
            same(value, decoded[root] if wrap else decoded)
    except Refusal as r:
        raise SerializationError(f"cannot encode {what}: {r.path(root)}: {r.reason}") from (
            r.__cause__
        )
    except Mismatch as m:
        raise SerializationError(
            f"cannot encode {what}: {m.path(root)} would not read back as stored: {m.reason}"
        ) from None
    except DecodeProblem as d:
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


class JsonCodec(Codec):
    """The default codec: faithful JSON, proved on write (it reads each value back)."""

    name = "json"

    def encode(self, value: object, *, what: str) -> str:
        if native_or_false(value):
            return to_text(value)
        return _encode_checked(what, [("value", value)], wrap=False)

    def encode_call(self, args: list[object], kwargs: dict[str, object], *, what: str) -> str:
        """``{"args": [...], "kwargs": {...}}`` as text, each part checked under its name."""
        text = call_text(args, kwargs)
        if text is not None:
            return text
        if native_or_false(args) and native_or_false(kwargs):
            return to_text({"args": args, "kwargs": kwargs})
        return _encode_checked(what, [("args", args), ("kwargs", kwargs)], wrap=True)

    def decode(self, text: str, *, what: str) -> object:
        try:
            return decode_text(text)
        except DecodeProblem as exc:
            raise SerializationError(f"cannot decode {what}: {exc.reason}") from exc.__cause__
        except json.JSONDecodeError as exc:
            raise SerializationError(
                f"cannot decode {what}: stored text is not valid JSON: {exc}"
            ) from exc
        except RecursionError as exc:
            raise SerializationError(
                f"cannot decode {what}: stored text is nested too deeply"
            ) from exc
        except Exception as exc:  # pragma: no cover - defensive
            raise SerializationError(f"cannot decode {what}: {type(exc).__name__}: {exc}") from exc


JSON = JsonCodec()
_codecs: dict[str, Codec] = {JSON.name: JSON}
_default: Codec = JSON


def register_codec(codec: Codec, *, replace: bool = False) -> None:
    """Make ``codec`` available by its name, to read values it wrote and for :func:`use_codec`.

    Raises :class:`~durable_core.errors.RegistrationError` if the name is invalid or another
    codec holds it (unless ``replace``: then ``codec`` takes its place, as the default too
    if the one it replaces was, as when an encrypting codec is given new keys).
    """
    global _default
    if not isinstance(codec, Codec):
        raise RegistrationError(f"register_codec: expected a Codec, got {type_name(type(codec))}")
    name = getattr(codec, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RegistrationError(
            f"register_codec: codec name {name!r} must be 1-64 letters, digits, '_', '.' or '-'"
        )
    held = _codecs.get(name)
    if held is not None and held is not codec and not replace:
        raise RegistrationError(f"register_codec: a codec named {name!r} is already registered")
    if held is JSON and codec is not JSON:
        raise RegistrationError("register_codec: the json codec cannot be replaced")
    _codecs[name] = codec
    if held is not None and _default is held:
        _default = codec


def codec_named(name: str) -> Codec:
    """The registered codec called ``name``; :class:`UnknownCodecError` if there is none."""
    codec = _codecs.get(name)
    if codec is None:
        raise UnknownCodecError(
            f"no codec named {name!r} is registered in this process "
            f"(registered: {', '.join(sorted(_codecs))}); call register_codec first"
        )
    return codec


def current_codec() -> Codec:
    """The codec new values are written with in this process (:func:`use_codec`)."""
    return _default


def registered_codec(name: str) -> Codec | None:
    """The codec registered as ``name``, if any."""
    return _codecs.get(name)


def use_codec(name: str) -> None:
    """Write new values in this process with the registered codec ``name`` (``"json"`` is the
    default). Values already stored keep being read by the codec that wrote them."""
    global _default
    _default = codec_named(name)


def _envelope(codec: Codec, text: str) -> str:
    if not isinstance(text, str):
        raise SerializationError(
            f"codec {codec.name!r} returned a {type_name(type(text))}, expected text (str)"
        )
    return f"{_MARK}{codec.name}:{text}"


def _call(codec: Codec, method: str, arg: object, what: str) -> Any:
    try:
        return getattr(codec, method)(arg, what=what)
    except FrameworkError:
        raise
    except Exception as exc:
        raise SerializationError(
            f"cannot {method} {what} with codec {codec.name!r}: {type(exc).__name__}: {exc}"
        ) from exc


def encode(value: object, *, what: str = "value") -> str:
    """Encode ``value`` as text that :func:`decode` turns back into an equal value, with this
    process's codec (:func:`use_codec`; faithful JSON by default).

    Raises :class:`SerializationError` naming ``what``, the path inside the value and the
    offending type if any part cannot be stored or would not read back identical.
    """
    codec = _default
    if codec is JSON:
        return JSON.encode(value, what=what)
    return _envelope(codec, _call(codec, "encode", value, what))


def decode(text: str, *, what: str = "value") -> object:
    """Decode text written by :func:`encode` with the codec it names (JSON if none).

    Raises :class:`SerializationError` if the text is bad, and :class:`UnknownCodecError` if
    it names a codec this process has not registered.
    """
    if not isinstance(text, str):
        raise SerializationError(
            f"cannot decode {what}: expected stored text (str), got {type_name(type(text))}"
        )
    if not text.startswith(_MARK):
        return JSON.decode(text, what=what)
    name, sep, payload = text[1:].partition(":")
    if not sep or not _NAME.fullmatch(name):
        raise SerializationError(
            f"cannot decode {what}: stored text starts with {_MARK!r} but names no codec: "
            f"{short(text)}"
        )
    codec = _codecs.get(name)
    if codec is None:
        raise UnknownCodecError(
            f"cannot decode {what}: it was written by codec {name!r}, which is not registered "
            f"in this process (registered: {', '.join(sorted(_codecs))}); register_codec it"
        )
    return _call(codec, "decode", payload, what)


def _codec_of(text: str) -> Codec:
    """The codec that wrote ``text`` (JSON when it names none)."""
    if not text.startswith(_MARK):
        return JSON
    name = text[1:].partition(":")[0]
    return codec_named(name)


def encode_arguments(
    args: tuple[object, ...], kwargs: dict[str, object], *, what: str, like: str | None = None
) -> str:
    """Encode call arguments as ``{"args": [...], "kwargs": {...}}``, deterministically.

    With the JSON codec the same arguments always give the same text, in any process: dict
    order is kept and set items are sorted by their encoded text. ``like``, stored text,
    picks the codec that wrote it instead of the default, so a replay compares like with like;
    with a codec whose texts differ each time (an encrypting one), ``like`` itself is
    returned when it holds these very arguments.
    """
    if not isinstance(args, tuple | list):
        raise SerializationError(
            f"cannot encode {what}: args must be a tuple, got {type_name(type(args))}"
        )
    if not isinstance(kwargs, dict) or not all(type(k) is str for k in kwargs):
        raise SerializationError(f"cannot encode {what}: kwargs must be a dict with str keys")
    codec = _default if like is None else _codec_of(like)
    if codec is JSON:
        return JSON.encode_call(list(args), kwargs, what=what)
    if like is not None and not codec.deterministic and same_arguments(like, args, kwargs):
        return like  # the same call: its text as recorded, not a new one of the same values
    call = {"args": list(args), "kwargs": dict(kwargs)}
    return _envelope(codec, _call(codec, "encode", call, what))


def decode_arguments(text: str, *, what: str) -> tuple[tuple[object, ...], dict[str, object]]:
    """Decode text written by :func:`encode_arguments` into ``(args, kwargs)``."""
    obj = decode(text, what=what)
    if (
        type(obj) is not dict
        or obj.keys() != {"args", "kwargs"}
        or type(obj["args"]) not in (list, tuple)
        or type(obj["kwargs"]) is not dict
        or not all(type(k) is str for k in obj["kwargs"])
    ):
        raise SerializationError(
            f'cannot decode {what}: stored arguments are not of the form {{"args": [...], '
            f'"kwargs": {{...}}}}: {short(obj, 200)}'
        )
    return tuple(obj["args"]), obj["kwargs"]


def same_stored(first: str, second: str) -> bool:
    """Whether two stored texts hold values that read back identical (types included): the
    same value, written twice by a codec whose text differs each time (an encrypting one's
    nonce). ``False`` when either cannot be read here."""
    if first == second:
        return True
    if not (first.startswith(_MARK) or second.startswith(_MARK)):
        return False  # two JSON texts of one value are the same text
    try:
        same(decode(first, what="a stored value"), decode(second, what="a stored value"))
    except (FrameworkError, Mismatch, RecursionError):
        return False
    return True


def same_arguments(text: str, args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
    """Whether stored call arguments read back identical (types included) to ``args`` and
    ``kwargs``: the same call, recorded before a class was renamed or the codec changed."""
    try:
        stored_args, stored_kwargs = decode_arguments(text, what="recorded arguments")
        same(list(stored_args), list(args))
        same(stored_kwargs, dict(kwargs))
    except (FrameworkError, Mismatch, RecursionError):
        return False
    return True
