"""The records observer hooks receive (as pytest's hooks receive ``report``).

Every hook about one attempt of a workflow takes an :class:`AttemptEvent` as its
``attempt`` argument, besides what is particular to it (``step_index``, ``error``, ...),
instead of repeating the attempt's fields in each signature.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ATTEMPT_FIELDS", "AttemptEvent"]


@dataclass(frozen=True, slots=True)
class AttemptEvent:
    """Which attempt of which workflow an event is about, and who runs it."""

    worker_id: str
    """The worker running the attempt (``WorkflowRunner``'s ``worker_id`` in-process)."""
    workflow_id: str
    workflow_name: str
    attempts: int
    """This attempt's number, from 1."""
    max_attempts: int
    """The workflow's attempt budget."""


ATTEMPT_FIELDS = ("worker_id", "workflow_id", "workflow_name", "attempts", "max_attempts")
"""The fields of :class:`AttemptEvent`: what an observer written for the hooks' earlier
signatures took as separate arguments."""
