"""The records of a group commit (:mod:`durable_core.runtime.group_commit`): a batch of
writes gathered for one flush and the future its writers await, a step's end written
behind, a step try whose ``running`` row may be written."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..seams.records import Lease, Settlement, StepWrite

UNWRITTEN, WRITING, WRITTEN = 0, 1, 2
"""Where a step try's ``running`` row stands."""


class Flushed(asyncio.Future[None]):
    """A batch's flush ending, which every write in the batch awaits directly. A waiter
    cancelled (its body stopped) cannot cancel it for the others: its cancellation is
    delivered once the flush has ended."""

    def cancel(self, msg: object = None) -> bool:
        return False


@dataclass(eq=False, slots=True)
class Batch:
    """The writes gathered for one flush, and what became of them."""

    steps: list[StepWrite] = field(default_factory=list)
    settlements: list[Settlement] = field(default_factory=list)
    starts: list[tuple[int, Start]] = field(default_factory=list)
    """The ``running`` rows among ``steps`` (by position), and their steps' tries."""
    ended: bool = False
    """The flush carrying the batch has ended (then ``error`` or the landed lists say how)."""
    done: Flushed | None = None
    """What waiters await: one plain future per batch, made by the first waiter."""
    landed_steps: list[bool] = field(default_factory=list)
    landed_settlements: list[bool] = field(default_factory=list)
    error: BaseException | None = None

    async def flushed(self) -> None:
        """Return once the flush carrying the batch has ended (at once if it has)."""
        if not self.ended:
            if self.done is None:
                self.done = Flushed()
            await self.done

    def end(self) -> None:
        """The flush ended: wake every write waiting on the batch."""
        self.ended = True
        if self.done is not None:
            self.done.set_result(None)

    async def landed(self, position: int, *, settlement: bool = False) -> bool:
        """Wait for the flush; whether the step write (or ``settlement``) at ``position``
        landed."""
        if not self.ended:
            await self.flushed()
        if self.error is not None:
            raise self.error
        return (self.landed_settlements if settlement else self.landed_steps)[position]


@dataclass(eq=False, slots=True)
class Owed:
    """A step's end written behind, and the flush that carries it (once one does)."""

    write: StepWrite
    batch: Batch | None = None
    position: int = -1
    folded: bool = False
    """It goes out with its workflow's settlement instead."""


@dataclass(eq=False, slots=True)
class Start:
    """A step try that began, and where its ``running`` row stands."""

    lease: Lease
    index: int
    name: str
    input: str
    began: float
    """When it began (``time.monotonic()``)."""
    path: str | None = None
    state: int = UNWRITTEN
    carrier: Batch | None = None
    """The batch carrying its ``running`` row, once one does (its state is decided when
    that flush ends, before anyone waiting on it resumes)."""


def with_step(settlement: Settlement, step: StepWrite) -> Settlement:
    """``dataclasses.replace(settlement, step=step)``, without its walk of the fields (a
    third of the cost; once per workflow)."""
    return Settlement(
        settlement.lease,
        settlement.status,
        settlement.output,
        settlement.error,
        settlement.retry_delay_seconds,
        settlement.parent_id,
        step,
    )
