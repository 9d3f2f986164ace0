"""``Ending``: how an attempt ended other than by its body returning or raising."""

from __future__ import annotations

import enum


class Ending(enum.Enum):
    """How an attempt ended other than by its body returning or raising."""

    SUSPENDED = "waiting"
    """Every branch waits: the row waits, holding no lease and no slot."""
    CANCELLED = "cancelled"
    """The workflow was cancelled while this attempt ran it."""
    TIMED_OUT = "timed_out"
    """The workflow's timeout passed."""
    LEASE_LOST = "lease_lost"
    """A write was refused or a renewal failed: the lease is gone (a reclaim, or a cancel
    heard only through the refusal)."""
