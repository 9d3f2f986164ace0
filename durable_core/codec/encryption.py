"""The encrypting codec: every payload AES-GCM encrypted before it reaches the database.

:class:`EncryptingCodec` writes a value as the faithful JSON of :mod:`durable_core.codec`,
encrypted with AES-256-GCM (``cryptography``, the ``[crypto]`` extra) under the key of
its current id: ``@aes-gcm:<key id>:<base64url(nonce, ciphertext, tag)>``. Each value
has its own random 96-bit nonce; the key id is bound to the ciphertext (authenticated
data), so a value altered in the database, or moved under another id, does not decrypt.

Keys have ids, so a key is rotated without rewriting anything: add the new key, make it
current, keep the old one for as long as values written under it may be read (values
are read with the key their text names). Keys come from a mapping, a callable returning
one (a secrets manager), or the environment (:func:`from_env`): ``DURABLE_ENCRYPTION_KEYS``
holds ``id=base64key`` pairs separated by commas, ``DURABLE_ENCRYPTION_KEY_ID`` the
current id (default: the last listed).

A codec's values are opaque to a process without its keys: the dashboard and the CLI
show them as ``encrypted (key <id>)`` unless started with the keys. Errors are stored
with their type in clear (``durable list --error``, the failures page) and their message,
traceback and details sealed with the same codec (:func:`~.failures.dump_error`).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, EncryptionKeyError
from .formats import JSON, Codec, register_codec, use_codec

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "KEYS_ENV",
    "KEY_ID_ENV",
    "EncryptingCodec",
    "configure_from_env",
    "from_env",
    "key_id_of",
    "new_key",
    "parse_keys",
]

KEYS_ENV = "DURABLE_ENCRYPTION_KEYS"
"""``id=base64key,id=base64key``: the keys, by id (each 16, 24 or 32 bytes)."""
KEY_ID_ENV = "DURABLE_ENCRYPTION_KEY_ID"
"""The id of the key new values are written with (default: the last of the keys)."""
KEY_ID = re.compile(r"[A-Za-z0-9_.\-]{1,32}")
"""What a key id looks like (it is stored with every value)."""
_NONCE = 12
_KEY_SIZES = (16, 24, 32)

Keys = Mapping[str, bytes]


class EncryptingCodec(Codec):
    """AES-GCM over faithful JSON, with keys by id (see the module's docstring).

    ``keys`` is a mapping of key id to key (16, 24 or 32 bytes; 32 for AES-256), or a
    callable returning one, called at the first encryption or decryption and again after
    :meth:`reload`; ``current`` is the id new values are written with (default: the
    last key). Register it and write with it::

        register_codec(EncryptingCodec({"2025-06": key}))
        use_codec("aes-gcm")
    """

    name = "aes-gcm"
    deterministic = False
    seals_errors = True

    def __init__(self, keys: Keys | Callable[[], Keys], *, current: str | None = None) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM as aesgcm
        except ModuleNotFoundError:
            raise ConfigurationError(
                "the encrypting codec needs cryptography, which is not installed: "
                "pip install 'durable-core[crypto]'"
            ) from None
        self._aesgcm = aesgcm
        self._source = keys
        self._wanted = current
        self._ciphers: dict[str, AESGCM] | None = None
        self._current = ""
        if not callable(keys):
            self._load()

    def reload(self) -> None:
        """Read the keys again at the next use (from the callable given, if one was)."""
        self._ciphers = None

    @property
    def current(self) -> str:
        """The id of the key new values are written with."""
        self._load()
        return self._current

    @property
    def key_ids(self) -> list[str]:
        """The ids of the keys this codec holds."""
        return list(self._load())

    def _load(self) -> dict[str, AESGCM]:
        if self._ciphers is not None:
            return self._ciphers
        keys = self._source() if callable(self._source) else self._source
        if not keys:
            raise ConfigurationError("the encrypting codec was given no key")
        ciphers: dict[str, AESGCM] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not KEY_ID.fullmatch(key_id):
                raise ConfigurationError(
                    f"an encryption key id is 1 to 32 letters, digits, '_', '.' or '-', "
                    f"got {key_id!r:.40}"
                )
            if not isinstance(key, bytes) or len(key) not in _KEY_SIZES:
                size = len(key) if isinstance(key, bytes) else type(key).__name__
                raise ConfigurationError(
                    f"encryption key {key_id!r} is {size} bytes: AES-GCM takes 16, 24 or 32"
                )
            ciphers[key_id] = self._aesgcm(key)
        current = self._wanted or list(ciphers)[-1]
        if current not in ciphers:
            raise ConfigurationError(
                f"the current encryption key {current!r} is not among the keys "
                f"({', '.join(ciphers)})"
            )
        self._ciphers, self._current = ciphers, current
        return ciphers

    def encode(self, value: object, *, what: str) -> str:
        return self.seal(JSON.encode(value, what=what))

    def decode(self, text: str, *, what: str) -> object:
        return JSON.decode(self.reveal(text, what=what), what=what)

    def seal(self, plain: str) -> str:
        """``plain`` encrypted under the current key: ``<key id>:<base64url>``."""
        ciphers = self._load()
        key_id = self._current
        nonce = secrets.token_bytes(_NONCE)
        sealed = ciphers[key_id].encrypt(nonce, plain.encode(), _bound(key_id))
        return f"{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def reveal(self, payload: str, *, what: str = "a value") -> str:
        """The JSON text encrypted in ``payload`` (``<key id>:<base64url>``, what
        :meth:`seal` wrote); :class:`EncryptionKeyError` when this process lacks its key
        or it does not decrypt."""
        key_id, sep, data = payload.partition(":")
        if not sep or not KEY_ID.fullmatch(key_id):
            raise EncryptionKeyError(f"cannot decrypt {what}: it names no key id")
        cipher = self._load().get(key_id)
        if cipher is None:
            raise EncryptionKeyError(
                f"cannot decrypt {what}: it was encrypted with key {key_id!r}, which this "
                f"process has not been given (it has {', '.join(self._load())}): keep every "
                f"key that values may still be written under in ${KEYS_ENV}"
            )
        try:
            raw = base64.urlsafe_b64decode(data.encode())
            plain: bytes = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], _bound(key_id))
        except (binascii.Error, ValueError) as exc:
            raise EncryptionKeyError(f"cannot decrypt {what}: it is not base64: {exc}") from None
        except Exception as exc:  # cryptography's InvalidTag
            raise EncryptionKeyError(
                f"cannot decrypt {what} with key {key_id!r}: the key is not the one it was "
                f"encrypted with, or the stored text was altered ({type(exc).__name__})"
            ) from None
        return plain.decode()


def key_id_of(payload: str) -> str:
    """The key id an ``aes-gcm`` payload names (``?`` when it names none)."""
    key_id = payload.partition(":")[0]
    return key_id if KEY_ID.fullmatch(key_id) else "?"


def _bound(key_id: str) -> bytes:
    return b"durable-core aes-gcm " + key_id.encode()


def new_key() -> str:
    """A new random 256-bit key, base64-encoded as ``DURABLE_ENCRYPTION_KEYS`` takes it."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


def parse_keys(text: str, where: str = KEYS_ENV) -> dict[str, bytes]:
    """``id=base64key,...`` as keys by id; a :class:`ConfigurationError` naming ``where``
    and the pair at fault (never the key itself)."""
    keys: dict[str, bytes] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        key_id, equals, encoded = pair.partition("=")
        key_id = key_id.strip()
        if not equals or not KEY_ID.fullmatch(key_id):
            raise ConfigurationError(
                f"{where}: each key is ID=BASE64 (an id of letters, digits, '_', '.', '-'), "
                f"separated by commas; entry {len(keys) + 1} is not"
            )
        try:
            keys[key_id] = base64.b64decode(encoded.strip() + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"{where}: key {key_id!r} is not base64") from None
    return keys


def from_env(environ: Mapping[str, str] | None = None) -> EncryptingCodec | None:
    """The codec of ``$DURABLE_ENCRYPTION_KEYS`` and ``$DURABLE_ENCRYPTION_KEY_ID`` (``None``
    when no key is set)."""
    env = os.environ if environ is None else environ
    text = env.get(KEYS_ENV, "").strip()
    if not text:
        return None
    return EncryptingCodec(parse_keys(text), current=env.get(KEY_ID_ENV, "").strip() or None)


def configure_from_env(environ: Mapping[str, str] | None = None) -> EncryptingCodec | None:
    """With keys in the environment, register their codec and write new values with it
    (what every ``durable`` command does first); else nothing."""
    codec = from_env(environ)
    if codec is not None:
        register_codec(codec, replace=True)
        use_codec(codec.name)
    return codec
