"""Retention: how long, and how many, settled workflows are kept before the fleet prunes them.

A :class:`Retention` is declared once, on a workflow (``@workflow(retention=...)``) or on
a queue (``Queue(..., retention=...)``); a workflow's own policy wins over its queue's.
Each status that ends a workflow (succeeded, failed, cancelled) has its own :class:`Keep`:
an age, a count, or both (then a workflow goes when it is older than the age *or* not
among the newest ``count``). A status with no ``Keep`` is kept forever. Workers apply
the policies (:mod:`durable_core.runtime.retention`); ``durable prune`` prunes by hand.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta

from ..durations import MAX_SECONDS, seconds
from ..errors import ConfigurationError, InvalidDurationError

__all__ = ["SETTLED", "Keep", "Retention", "parse_age"]

SETTLED = ("succeeded", "failed", "cancelled")
"""The statuses a retention policy and ``durable prune`` act on, in this order."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_AGE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([smhdw]?)\s*$")

Age = float | timedelta | str
"""A duration: seconds, a ``timedelta``, or text such as ``"30d"``, ``"12h"``, ``"90m"``."""


def parse_age(value: Age, what: str) -> float:
    """``value`` in seconds, above 0: seconds, a ``timedelta`` or ``<number><s|m|h|d|w>``
    text; :class:`InvalidDurationError` naming ``what`` otherwise (``-1d``, ``nan``, ...)."""
    if isinstance(value, str):
        found = _AGE.match(value)
        number = float(found[1]) * _UNITS[found[2] or "s"] if found else math.nan
        if not found or not 0 < number <= MAX_SECONDS:
            raise InvalidDurationError(
                f"{what} must be a positive age such as 30d, 12h, 90m or 45s "
                f"(at most 100 years), got {value!r}"
            )
        return number
    return seconds(value, what, allow_zero=False)


@dataclass(frozen=True, slots=True)
class Keep:
    """How long (``age``) and how many (``count``) workflows of one status are kept.

    With both, a workflow is pruned once it is older than ``age`` or is not among the
    ``count`` newest (each counted within the policy's workflow or queue). Neither may
    be zero: a policy that keeps nothing would delete every workflow as it settles.
    """

    age: Age | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.age is None and self.count is None:
            raise ConfigurationError("Keep() needs an age, a count or both, got neither")
        if self.age is not None:
            object.__setattr__(self, "age", parse_age(self.age, "Keep age"))
        count = self.count
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise ConfigurationError(f"Keep count must be a whole number, got {count!r}")
        if count is not None and count < 1:
            raise ConfigurationError(
                f"Keep count must be at least 1 (a count of {count} would delete every "
                "workflow as it settles)"
            )

    @property
    def seconds(self) -> float | None:
        """The age in seconds (``None``: no age)."""
        return None if self.age is None else float(self.age)  # type: ignore[arg-type]


def _keep(value: Keep | Age | None, status: str) -> Keep | None:
    if value is None or isinstance(value, Keep):
        return value
    try:
        return Keep(age=value)
    except InvalidDurationError as exc:
        raise InvalidDurationError(f"Retention {status}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Retention:
    """A retention policy: what is kept of each settled status (``None``: all of it).

    A status given an age alone may be given as the age (``succeeded="7d"`` is
    ``succeeded=Keep(age="7d")``). ``every`` is how often the fleet applies it (one
    worker at a time, in batches of ``batch`` workflows per transaction)::

        Retention(succeeded="7d", failed=Keep(age="90d", count=10_000), cancelled="7d")
    """

    succeeded: Keep | Age | None = None
    failed: Keep | Age | None = None
    cancelled: Keep | Age | None = None
    every: Age = 60.0
    batch: int = 1000

    def __post_init__(self) -> None:
        for status in SETTLED:
            object.__setattr__(self, status, _keep(getattr(self, status), status))
        if all(getattr(self, status) is None for status in SETTLED):
            raise ConfigurationError(
                "Retention() keeps everything: give succeeded, failed or cancelled a Keep"
            )
        object.__setattr__(self, "every", parse_age(self.every, "Retention every"))
        batch = self.batch
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise ConfigurationError(
                f"Retention batch must be a whole number from 1 to 10000, got {batch!r}"
            )

    def kept(self) -> dict[str, Keep]:
        """Each status this policy prunes, with what it keeps of it."""
        found = {status: getattr(self, status) for status in SETTLED}
        return {status: keep for status, keep in found.items() if keep is not None}

    @property
    def interval(self) -> float:
        """``every``, in seconds."""
        return float(self.every)  # type: ignore[arg-type]
