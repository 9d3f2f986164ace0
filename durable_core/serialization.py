"""The codec's functions under their first home; see :mod:`durable_core.codec`."""

from __future__ import annotations

from .codec import TAG_KEY, convert, decode, decode_arguments, encode, encode_arguments

__all__ = [
    "TAG_KEY",
    "convert",
    "decode",
    "decode_arguments",
    "encode",
    "encode_arguments",
]
