"""Workflow ids: a new one for each start, and the ids a caller may choose."""

from __future__ import annotations

import re
import secrets
import time

from ..errors import ConfigurationError
from ..seams.records import check_storable

MAX_ID_LENGTH = 255
"""The longest workflow id a caller may choose (the id columns' width, schema 7 on)."""

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters and the bidirectional formatting ones: an id holding one would not
read as itself on a terminal, in a log line or a page."""


def new_workflow_id() -> str:
    """A UUIDv7 string: time-ordered, so inserts land at the end of the primary-key index."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def check_workflow_id(workflow_id: object) -> str:
    """``workflow_id`` if a caller may choose it: 1 to :data:`MAX_ID_LENGTH` characters of
    any kind (``/``, ``#``, ``?``, ``%``, spaces, any script) but control and
    bidirectional formatting characters; else a :class:`ConfigurationError`."""
    if not (isinstance(workflow_id, str) and 0 < len(workflow_id) <= MAX_ID_LENGTH):
        raise ConfigurationError(
            f"a workflow id is a string of 1 to {MAX_ID_LENGTH} characters, got "
            f"{workflow_id!r:.300}"
        )
    check_storable("a workflow id", workflow_id)
    bad = _UNPRINTABLE.search(workflow_id)
    if bad is not None:
        raise ConfigurationError(
            f"a workflow id holds no control or bidirectional formatting character, got "
            f"U+{ord(bad[0]):04X} in {workflow_id!r:.300}"
        )
    return workflow_id
