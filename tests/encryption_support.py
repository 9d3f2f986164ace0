"""Encrypting this test process's writes for a while, and the secrets to look for in tables."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from durable_core.codec import EncryptingCodec, register_codec, use_codec


def key_text(key: bytes) -> str:
    return base64.b64encode(key).decode()


def keys_env(keys: Mapping[str, bytes], current: str | None = None) -> dict[str, str]:
    """The environment a ``durable`` command reads ``keys`` from."""
    env = {"DURABLE_ENCRYPTION_KEYS": ",".join(f"{k}={key_text(v)}" for k, v in keys.items())}
    if current is not None:
        env["DURABLE_ENCRYPTION_KEY_ID"] = current
    return env


@contextmanager
def encrypting(keys: Mapping[str, bytes], current: str | None = None) -> Iterator[EncryptingCodec]:
    """This process writes new values with an encrypting codec of ``keys`` (and reads with
    them) inside the block; plain JSON again after it."""
    codec = EncryptingCodec(dict(keys), current=current)
    register_codec(codec, replace=True)
    use_codec(codec.name)
    try:
        yield codec
    finally:
        use_codec("json")


def found_in(rows: Mapping[str, list[tuple[Any, ...]]], secrets: list[str]) -> list[str]:
    """Each ``table: secret`` where a row of the table holds one of ``secrets``."""
    found = []
    for table, table_rows in rows.items():
        text = repr(table_rows)
        found += [f"{table}: {secret}" for secret in secrets if secret in text]
    return found
