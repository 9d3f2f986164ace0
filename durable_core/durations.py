"""Durations and deadlines: the one rule every one the API accepts is checked by.

A duration is seconds (an int or a float) or a :class:`~datetime.timedelta`:
finite, not negative (positive where zero would mean nothing), and at most
:data:`MAX_DURATION`. A deadline is a timezone-aware :class:`~datetime.datetime`
within :data:`MAX_DURATION` of now. So every moment computed from one (a start
delay, a timeout, a sleep) stays far inside what Python's ``datetime`` and each
database can hold, and a bad value is refused where it enters, naming itself.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from .errors import InvalidDurationError


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


MAX_DURATION = timedelta(days=36525)
"""The longest duration, and the farthest deadline from now, accepted: 100 years."""

MAX_SECONDS = MAX_DURATION.total_seconds()
""":data:`MAX_DURATION` in seconds (3,155,760,000)."""

_RANGE = "at most 100 years (in seconds or a timedelta)"


def seconds(
    value: float | timedelta,
    what: str,
    *,
    allow_zero: bool = True,
    error: type[InvalidDurationError] = InvalidDurationError,
) -> float:
    """``value`` in seconds; ``error`` naming ``what`` unless it is a finite duration from 0
    (above 0 without ``allow_zero``) to :data:`MAX_DURATION`."""
    number = math.nan
    if isinstance(value, timedelta):
        number = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.inf
    if not (0 <= number <= MAX_SECONDS) or (number == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise error(f"{what} must be a {kind} duration of {_RANGE}, got {value!r}")
    return number


def delta(
    value: float | timedelta,
    what: str,
    *,
    allow_zero: bool = True,
    error: type[InvalidDurationError] = InvalidDurationError,
) -> timedelta:
    """:func:`seconds` as a :class:`~datetime.timedelta`."""
    return timedelta(seconds=seconds(value, what, allow_zero=allow_zero, error=error))


def deadline(
    moment: datetime,
    what: str,
    *,
    error: type[InvalidDurationError] = InvalidDurationError,
) -> datetime:
    """``moment``; ``error`` naming ``what`` unless it is a timezone-aware datetime within
    :data:`MAX_DURATION` of now (before or after)."""
    aware = isinstance(moment, datetime) and moment.utcoffset() is not None
    if not aware or abs(moment - datetime.now(UTC)) > MAX_DURATION:
        raise error(
            f"{what} must be a timezone-aware datetime within 100 years of now, got {moment!r}"
        )
    return moment


__all__ = ["MAX_DURATION", "MAX_SECONDS", "deadline", "delta", "seconds"]
