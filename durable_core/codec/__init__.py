"""The codec: how workflow arguments, step inputs/outputs, messages and events are stored.

Values are stored as text by a named codec (:mod:`.formats`). The default, ``json``, writes
compact JSON. JSON-native values (``None``, ``bool``, ``int``, finite ``float``, ``str``,
lists, dicts with ``str`` keys) are written as they are; every other supported value becomes
a tagged object ``{"__durable__": "<kind>", ...}``:

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
``enum``        ``"type": NAME, "value": member value``
``dataclass``   ``"type": NAME, "fields": {name: value}``
``namedtuple``  ``"type": NAME, "items": [...]``
``pydantic``    ``"type": NAME, "data": model_dump(mode="python")``
``custom``      ``"type": NAME, "data": what the class's registered codec made of it``
==============  ===========================================================================

``TZ`` is ``null``, ``{"offset": seconds, ["us": microseconds], ["name": str]}`` for a
``datetime.timezone`` or ``{"zone": key}`` for a ``zoneinfo.ZoneInfo``. ``NAME`` is the name
the class is registered under (:func:`durable_type`), else ``module:qualname``.

:func:`encode` proves every value it accepts: it reads the text back and compares the result
with the original (types included, recursively) and raises :class:`SerializationError` on the
first run if anything would change. Decoding never guesses and never imports a module that
stored text names unless the type is registered or its module allowed (:mod:`.registry`).

Modules: ``text`` (JSON text and shared helpers), ``registry`` (the registry of type names),
``encode``, ``decode``, ``verify``, ``formats`` (named codecs and the public functions),
``convert`` (msgspec), ``encryption`` (:class:`EncryptingCodec`: AES-GCM with keys by id),
``erasure`` (the tombstone an erased payload leaves), ``failures`` (errors as stored text).
They import only :mod:`durable_core.errors` from the rest of the library.
"""

from __future__ import annotations

from . import erasure as erasure  # registers the tombstone's codec
from .convert import convert
from .encryption import EncryptingCodec
from .formats import (
    Codec,
    JsonCodec,
    decode,
    decode_arguments,
    encode,
    encode_arguments,
    register_codec,
    same_arguments,
    use_codec,
)
from .registry import allow_modules, durable_type, register_type
from .text import TAG_KEY

__all__ = [
    "TAG_KEY",
    "Codec",
    "EncryptingCodec",
    "JsonCodec",
    "allow_modules",
    "convert",
    "decode",
    "decode_arguments",
    "durable_type",
    "encode",
    "encode_arguments",
    "register_codec",
    "register_type",
    "same_arguments",
    "use_codec",
]
