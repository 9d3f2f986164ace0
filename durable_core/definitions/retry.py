"""``RetryPolicy``: how often, how soon, and on which errors a step or a workflow runs again."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..durations import MAX_SECONDS, seconds
from ..errors import ConfigurationError, FrameworkError, InvalidDurationError, leaf_errors


@dataclass(frozen=True)
class RetryPolicy:
    """Retry with exponential backoff.

    Try ``n`` (counting from 1) that failed waits ``initial_interval *
    backoff_coefficient ** (n - 1)`` seconds, at most ``max_interval``, spread by
    up to ``jitter`` of itself either way, before try ``n + 1``; there are at most
    ``max_attempts`` tries. An error is retried when it is an instance of one of
    ``retry_on`` and of none of ``give_up_on``; a :class:`NonRetryableError` (or any
    ``FrameworkError`` marked not retryable) never is.
    """

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    max_interval: float | None = None
    jitter: float = 0.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    give_up_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        problems = []
        if self.max_attempts < 1:
            problems.append(f"max_attempts must be at least 1, got {self.max_attempts}")
        for name in ("initial_interval", "max_interval"):
            value = getattr(self, name)
            if value is None:
                continue
            try:  # seconds, or a timedelta made seconds
                object.__setattr__(self, name, seconds(value, name))
            except InvalidDurationError as exc:
                problems.append(str(exc))
        if not (self.backoff_coefficient >= 1 and math.isfinite(self.backoff_coefficient)):
            problems.append(
                f"backoff_coefficient must be >= 1 and finite, got {self.backoff_coefficient}"
            )
        if not 0 <= self.jitter <= 1:
            problems.append(f"jitter must be between 0 and 1, got {self.jitter}")
        for name in ("retry_on", "give_up_on"):
            kinds = getattr(self, name)
            if not isinstance(kinds, tuple) or not all(
                isinstance(k, type) and issubclass(k, BaseException) for k in kinds
            ):
                problems.append(f"{name} must be a tuple of exception classes, got {kinds!r}")
        if problems:
            raise ConfigurationError("invalid RetryPolicy: " + "; ".join(problems))

    def delay(self, tries: int) -> float:
        """Seconds to wait after the ``tries``-th failed try (at most
        :data:`~durable_core.durations.MAX_DURATION`, however steep the backoff)."""
        try:
            base = self.initial_interval * float(self.backoff_coefficient) ** max(tries - 1, 0)
        except OverflowError:
            base = math.inf if self.initial_interval else 0.0
        if self.max_interval is not None:
            base = min(base, self.max_interval)
        if self.jitter:
            base *= 1 + random.uniform(-self.jitter, self.jitter)
        return min(max(base, 0.0), MAX_SECONDS)

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` may be retried at all; an exception group (a task group whose
        branches failed) only when every exception in it may."""
        return all(self._retries(leaf) for leaf in leaf_errors(error))

    def _retries(self, error: BaseException) -> bool:
        if isinstance(error, FrameworkError) and not error.retryable:
            return False
        return isinstance(error, self.retry_on) and not isinstance(error, self.give_up_on)
