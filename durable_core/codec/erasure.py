"""What an erased payload leaves behind: a tombstone that reads as an error, never a value.

``durable erase`` (:meth:`~durable_core.caller.client.DurableClient.erase`) replaces a
settled workflow's payloads with ``@erased:{"at": ...}``: a value of the codec ``erased``,
registered in every process, whose decoding raises :class:`ErasedValueError` (a body
replaying over it, or a caller reading it, is told so, not handed a wrong value). An
erased error keeps its type and step, for audit; its message, traceback and details go.
"""

from __future__ import annotations

import json
from datetime import datetime

from ..errors import ErasedValueError
from .formats import Codec, register_codec

__all__ = ["ERASED", "ErasedCodec", "erased_error", "tombstone"]

ERASED = "erased"
"""The name of the tombstone's codec."""
_KEPT = ("type", "step_index", "step_name")
"""What an erased error keeps."""


class ErasedCodec(Codec):
    """Reads a tombstone as :class:`ErasedValueError`; writes nothing."""

    name = ERASED

    def encode(self, value: object, *, what: str) -> str:
        raise ErasedValueError(
            f"cannot compare {what} with its recorded value: that value was erased"
        )

    def decode(self, text: str, *, what: str) -> object:
        try:
            at = json.loads(text).get("at", "?")
        except (ValueError, AttributeError):
            at = "?"
        raise ErasedValueError(
            f"{what} was erased at {at} (durable erase): the workflow's row and history are "
            "kept for audit, its payloads are not, so it cannot be read, replayed or retried"
        )


def tombstone(at: datetime) -> str:
    """The text that replaces an erased payload."""
    return f"@{ERASED}:{json.dumps({'at': at.isoformat()})}"


def erased_error(text: str | None, at: datetime) -> str | None:
    """The ``error`` column ``text`` with its payload erased: its type and step kept (the
    type first, as every recorded error begins), the rest gone."""
    if text is None:
        return None
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        found = None
    kept = {key: found[key] for key in _KEPT if key in found} if isinstance(found, dict) else {}
    kept.setdefault("type", None)
    record = {
        "type": kept.pop("type"),
        "message": f"erased at {at.isoformat()}",
        "traceback": None,
        **kept,
        "erased": at.isoformat(),
    }
    return json.dumps(record, ensure_ascii=False)


register_codec(ErasedCodec())
