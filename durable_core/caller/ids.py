"""Workflow ids: a new one for each start, and the longest a caller may choose."""

from __future__ import annotations

import secrets
import time

MAX_ID_LENGTH = 255
"""The longest workflow id a caller may choose (the id columns' width, schema 7 on)."""


def new_workflow_id() -> str:
    """A UUIDv7 string: time-ordered, so inserts land at the end of the primary-key index."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
