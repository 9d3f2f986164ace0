"""Debounce keys: starts within a window collapse into one run, with the last arguments.

``client.start_workflow_debounced(DebounceKey("user-42", 5), fn, *args)`` starts ``fn``
5 seconds from now unless a start of the same workflow with the same key is already
waiting: then that run takes these arguments and waits 5 more seconds, at most
``max_wait`` after the window opened. Every caller, in any process, gets a handle to
the one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ..durations import seconds
from ..errors import ConfigurationError

MAX_DEBOUNCE_KEY = 255
"""The longest debounce key (the column's width)."""


@dataclass(frozen=True, slots=True)
class DebounceKey:
    """What a debounced start collapses by: the workflow's name and ``key`` (a user id,
    a document id). The run starts ``seconds`` after the last start of the window, and
    at most ``max_wait`` seconds after its first (``None``: no cap); either may be a
    ``timedelta``. ``max_wait`` is the window's as its first start gave it."""

    key: str
    seconds: float | timedelta
    max_wait: float | timedelta | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not 0 < len(self.key) <= MAX_DEBOUNCE_KEY:
            raise ConfigurationError(
                f"a debounce key is a string of 1 to {MAX_DEBOUNCE_KEY} characters, "
                f"got {self.key!r}"
            )
        window = seconds(self.seconds, "DebounceKey seconds", allow_zero=False)
        object.__setattr__(self, "seconds", window)
        if self.max_wait is not None:
            cap = seconds(self.max_wait, "DebounceKey max_wait", allow_zero=False)
            object.__setattr__(self, "max_wait", cap)

    @property
    def window_seconds(self) -> float:
        """:attr:`seconds` as a float."""
        return float(self.seconds)  # type: ignore[arg-type]

    @property
    def max_wait_seconds(self) -> float | None:
        """:attr:`max_wait` as a float (``None``: no cap)."""
        return None if self.max_wait is None else float(self.max_wait)  # type: ignore[arg-type]


__all__ = ["MAX_DEBOUNCE_KEY", "DebounceKey"]
