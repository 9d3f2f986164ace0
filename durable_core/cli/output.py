"""What the commands print: stored text made safe for a terminal, and moments.

Stored text (names, inputs, outputs, error messages, tracebacks) is anyone's:
printed as it is, an escape sequence in it could recolour, move the cursor,
retitle the window or hide the lines around it. :func:`printable` drops every
escape sequence and control character but tab and newline. A moment at or
beyond :data:`~durable_core.seams.records.FOREVER` (what a wait with no deadline
stores) means "never", and is never printed as a date.

The bidirectional formatting characters (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) go
too: they reorder what follows them on the line, so ``evil\u202egnp.exe`` would read as
``evilexe.png``.
"""

from __future__ import annotations

import re
from datetime import datetime

from ..seams.records import FOREVER

_CONTROL = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]              # CSI: colours, cursor moves, erasing
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?   # OSC: window titles, hyperlinks
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?        # DCS, SOS, PM and APC strings
    | \x1b[ -/]*[0-~]?                     # the other escapes (and a lone ESC)
    | \x9b[0-?]*[ -/]*[@-~]                # CSI in its 8-bit form
    | [\x00-\x08\x0b-\x1f\x7f-\x9f]        # any other control character
    | [\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]  # bidirectional formatting: reorders
    """,
    re.VERBOSE,
)


def printable(text: object, *, one_line: bool = False) -> str:
    """``text`` with its terminal escape sequences and control characters removed (tab and
    newline stay, unless ``one_line``: then each line break is a space)."""
    clean = _CONTROL.sub("", str(text))
    return " ".join(clean.splitlines()) if one_line else clean


def iso(moment: datetime | None) -> str | None:
    """``moment`` in ISO 8601, or ``None`` when there is none or it is "never"."""
    return None if moment is None or moment >= FOREVER else moment.isoformat()


def when(moment: datetime | None, pattern: str = "%Y-%m-%d %H:%M:%S", never: str = "-") -> str:
    """``moment`` formatted with ``pattern``; ``never`` when there is none or it is "never"."""
    return never if moment is None or moment >= FOREVER else moment.strftime(pattern)
