"""``StepTries``: the step tries a group commit's attempts began and have not ended, and
where each one's ``running`` row stands (:mod:`durable_core.runtime.group_commit`).

A try's ``running`` row is written only once the step has run ``step_row_after``
seconds; a try that ends sooner writes one row, with its end.
"""

from __future__ import annotations

import time

from ..seams.records import Lease, StepStatus, StepWrite
from .batches import UNWRITTEN, WRITTEN, Batch, Start


class StepTries:
    """The tries begun and not ended, by workflow and step index, and those whose
    ``running`` row is not written yet, oldest first."""

    def __init__(self) -> None:
        self._begun: dict[str, dict[int, Start]] = {}
        self._unwritten: dict[tuple[str, int], Start] = {}

    def begin(
        self,
        lease: Lease,
        index: int,
        name: str,
        input: str,
        path: str | None,
        *,
        row_late: bool,
    ) -> Start:
        """A try of step ``index`` began under ``lease``; with ``row_late``, its ``running``
        row waits for :meth:`due`."""
        start = Start(lease, index, name, input, time.monotonic(), path)
        self._begun.setdefault(lease.workflow_id, {})[index] = start
        if row_late:
            self._unwritten[(lease.workflow_id, index)] = start
        return start

    def get(self, lease: Lease, index: int) -> Start | None:
        """The try of step ``index`` that began under ``lease`` and has not ended."""
        begun = self._begun.get(lease.workflow_id)
        return None if begun is None else begun.get(index)

    def end(
        self, start: Start, status: StepStatus, output: str | None, error: str | None
    ) -> StepWrite:
        """End the try ``start`` (its ``running`` row no longer being written): the write
        of its end."""
        workflow, index = start.lease.workflow_id, start.index
        begun = self._begun[workflow]
        del begun[index]
        if not begun:
            del self._begun[workflow]
        if start.state == UNWRITTEN:
            self._unwritten.pop((workflow, index), None)
        return StepWrite(
            start.lease,
            index,
            start.name,
            status,
            start.input,
            output,
            error,
            start.state != WRITTEN,
            start.began,
            start.path,
        )

    def unlist(self, start: Start) -> None:
        """The try ``start``'s ``running`` row is not to be written (its end is written
        elsewhere); it stays begun."""
        self._unwritten.pop((start.lease.workflow_id, start.index), None)

    def due(self, after: float) -> list[Start]:
        """The tries that have run ``after`` seconds with no ``running`` row: theirs is now
        to be written (they leave the unwritten)."""
        now = time.monotonic()
        due: list[Start] = []
        for start in self._unwritten.values():
            if now - start.began < after:
                break  # the rest began later
            due.append(start)
        for start in due:
            del self._unwritten[(start.lease.workflow_id, start.index)]
        return due

    def written(self, batch: Batch, *, again: bool) -> None:
        """The flush carrying ``batch`` ended: the ``running`` rows it carried are written,
        or (refused, or the flush failed) not; with ``again``, the row of a try a failed
        flush carried is due again."""
        failed = batch.error is not None
        for position, start in batch.starts:
            if not failed and batch.landed_steps[position]:
                start.state = WRITTEN
                continue
            if self.get(start.lease, start.index) is start:
                start.state = UNWRITTEN
                if failed and again:
                    self._unwritten[(start.lease.workflow_id, start.index)] = start

    def forget(self, workflow_id: str) -> None:
        """The attempt of ``workflow_id`` ended: drop the tries it left unended."""
        for index in self._begun.pop(workflow_id, {}):
            self._unwritten.pop((workflow_id, index), None)

    @staticmethod
    def running_row(start: Start) -> StepWrite:
        """The ``running`` row of the try ``start``."""
        return StepWrite(
            start.lease,
            start.index,
            start.name,
            StepStatus.RUNNING,
            start.input,
            began=start.began,
            path=start.path,
        )
