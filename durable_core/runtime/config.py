"""Worker configuration: the ``WORKFLOW_*`` environment variables."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..durations import MAX_SECONDS
from ..errors import ConfigurationError
from ..redaction import get_logger

logger = get_logger("durable_core.config")


@dataclass(frozen=True, slots=True)
class _Setting:
    field: str
    env: str
    default: int
    minimum: int
    unit: float | None = None
    """A duration's seconds per unit (none is longer than 100 years, the
    :data:`~durable_core.durations.MAX_DURATION`); ``None``: not a duration."""

    @property
    def maximum(self) -> float:
        return math.inf if self.unit is None else MAX_SECONDS / self.unit


SETTINGS = (
    _Setting("poll_interval_ms", "WORKFLOW_POLL_INTERVAL_MS", 1000, 1, unit=0.001),
    _Setting("concurrency", "WORKFLOW_CONCURRENCY", 4, 1),
    _Setting("lock_timeout_secs", "WORKFLOW_LOCK_TIMEOUT_SECS", 30, 1, unit=1),
    _Setting("max_attempts", "WORKFLOW_MAX_ATTEMPTS", 3, 1),
    _Setting("retry_backoff_secs", "WORKFLOW_RETRY_BACKOFF_SECS", 5, 0, unit=1),
    _Setting("group_commit", "WORKFLOW_GROUP_COMMIT", 1, 0),
    _Setting("step_row_after_ms", "WORKFLOW_STEP_ROW_AFTER_MS", 100, 0, unit=0.001),
    _Setting("drain_timeout_secs", "WORKFLOW_DRAIN_TIMEOUT_SECS", 30, 0, unit=1),
    _Setting("flushes_in_flight", "WORKFLOW_FLUSHES_IN_FLIGHT", 0, 0),
    _Setting("flush_min_batch", "WORKFLOW_FLUSH_MIN_BATCH", 0, 0),
)


PIPELINE_FROM = 100
"""The concurrency from which a worker pipelines its flushes by default. Measured on two
cores with PostgreSQL beside the worker (``bench/scenarios/ceiling.py``): at 128, two
flushes in flight drained 1.1 to 1.4 times as fast as one; at 32 no faster, for more
CPU per workflow (the smaller batches cost more flushes)."""


@dataclass(frozen=True, slots=True)
class WorkflowConfig:
    """How a worker claims and retries.

    Build it with :meth:`from_env` (values are clamped, with a warning) or in
    code followed by :meth:`validate` (values are checked, with an error).
    """

    poll_interval_ms: float = 1000
    concurrency: int = 4
    lock_timeout_secs: float = 30
    max_attempts: int = 3
    retry_backoff_secs: float = 5
    group_commit: int = 1
    """Nonzero: a worker on a store that can (PostgreSQL) commits the step rows and
    settlements of its workflows together, one statement per flush."""
    step_row_after_ms: float = 100
    """With group commit, a step's ``running`` row is written only once the step has run
    this long; a faster step writes one row, with its output (0: always at once)."""
    drain_timeout_secs: float = 30
    """Once told to stop (SIGTERM), how long a worker waits for its in-flight workflows
    before it abandons them to their lease expiry and exits."""
    flushes_in_flight: int = 0
    """With group commit, how many flushes may be in flight at once (pipelining: the next
    batch goes out while one commits); 1 sends each once the one before has ended; 0
    (the default) pipelines two from a concurrency of :data:`PIPELINE_FROM`, where it
    pays (see :attr:`pipelining`)."""
    flush_min_batch: int = 0
    """With more than one flush in flight, how many writes a batch gathers before it goes
    out while another flush is in flight (a lone batch goes out at once); 0 (the
    default): half the concurrency."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkflowConfig:
        """Read the ``WORKFLOW_*`` variables; garbled or out-of-range values are clamped
        to a safe value with a ``logging`` warning, so a typo cannot stop the worker."""
        env = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for setting in SETTINGS:
            values[setting.field] = _read(env, setting)
        return cls(**values)

    def validate(self) -> WorkflowConfig:
        """Raise :class:`ConfigurationError` naming every value out of range; return self."""
        problems = []
        for setting in SETTINGS:
            value = getattr(self, setting.field)
            if isinstance(value, bool) or not isinstance(value, int | float):
                problems.append(f"{setting.field} must be a number, got {value!r}")
            elif value != value or value < setting.minimum:
                problems.append(f"{setting.field} must be at least {setting.minimum}, got {value}")
            elif value > setting.maximum:
                problems.append(
                    f"{setting.field} must be at most {setting.maximum:.0f} (100 years), "
                    f"got {value}"
                )
        for whole in ("concurrency", "max_attempts", "flushes_in_flight", "flush_min_batch"):
            if isinstance(getattr(self, whole), float):
                problems.append(f"{whole} must be a whole number, got {getattr(self, whole)}")
        if problems:
            raise ConfigurationError("invalid WorkflowConfig: " + "; ".join(problems))
        return self

    @property
    def pipelining(self) -> tuple[int, int]:
        """The flushes in flight and the minimum batch a group commit uses: the settings,
        or where one is 0, two flushes from a concurrency of :data:`PIPELINE_FROM` (else
        one) and half the concurrency."""
        in_flight = self.flushes_in_flight or (2 if self.concurrency >= PIPELINE_FROM else 1)
        return in_flight, self.flush_min_batch or max(1, self.concurrency // 2)

    @property
    def poll_interval(self) -> float:
        """Seconds between empty claim rounds."""
        return self.poll_interval_ms / 1000

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between lease renewals: half the lock timeout."""
        return self.lock_timeout_secs / 2

    def retry_delay(self, attempts: int) -> float:
        """Linear backoff: ``attempts * retry_backoff_secs``, at most 100 years."""
        return min(attempts * self.retry_backoff_secs, MAX_SECONDS)


def _read(env: Mapping[str, str], setting: _Setting) -> int:
    raw = env.get(setting.env)
    if raw is None or raw.strip() == "":
        return setting.default
    try:
        value = int(raw.strip())
    except ValueError:
        logger.warning(
            "%s=%r is not a whole number; using the default %d",
            setting.env,
            raw,
            setting.default,
            extra={"setting": setting.env, "raw": raw, "used": setting.default},
        )
        return setting.default
    if value < setting.minimum:
        logger.warning(
            "%s=%d is below the minimum %d; clamped to %d",
            setting.env,
            value,
            setting.minimum,
            setting.minimum,
            extra={"setting": setting.env, "raw": raw, "used": setting.minimum},
        )
        return setting.minimum
    if value > setting.maximum:
        used = int(setting.maximum)
        logger.warning(
            "%s=%d is above the maximum %d (100 years); clamped to %d",
            setting.env,
            value,
            used,
            used,
            extra={"setting": setting.env, "raw": raw, "used": used},
        )
        return used
    return value


def default_max_attempts() -> int:
    """The attempt budget of a workflow that sets none: ``WORKFLOW_MAX_ATTEMPTS``, or 3."""
    if "WORKFLOW_MAX_ATTEMPTS" in os.environ:
        return WorkflowConfig.from_env().max_attempts
    return WorkflowConfig().max_attempts


__all__ = ["PIPELINE_FROM", "SETTINGS", "WorkflowConfig", "default_max_attempts"]
