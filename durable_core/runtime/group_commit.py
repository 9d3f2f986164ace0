"""``GroupCommit``: the writes of a worker's in-flight attempts, committed together.

A durable step only has to be committed before the workflow goes on, not in a
transaction of its own. Every step row and settlement the worker's attempts write
is handed to one flusher, and the workflow goes on only once its write has committed;
the flusher sends everything handed to it since its last flush as one statement
(:meth:`~durable_core.seams.store.BatchWriter.write_batch`), each row fenced by its own
lease, while the next flush gathers. A lone write goes out at once: no timer delays
it.

A step's ``running`` row is written only when the step runs longer than
``step_row_after`` seconds; a faster step writes one row, with its output, when it
ends. A crash inside a step that left no row runs the step again, exactly as one
that left a ``running`` row does.

A step's end is written behind: it goes out with the next flush, and the workflow
waits for it to commit only before its next durable action (the next step, a
primitive, a wait), so every step is committed before the next one begins. The last
step's end goes out with the settlement, in its statement.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from ..errors import LeaseLostError
from ..seams.plugins import observers
from ..seams.records import Lease, Settlement, StepStatus, StepWrite, Wait
from ..seams.store import BatchWriter, Store

_UNWRITTEN, _WRITING, _WRITTEN = 0, 1, 2


class GroupStore(Store, BatchWriter, Protocol):
    """A store that commits writes in groups (PostgreSQL's)."""


@dataclass(eq=False, slots=True)
class _Batch:
    """The writes gathered for one flush, and what became of them."""

    steps: list[StepWrite] = field(default_factory=list)
    settlements: list[Settlement] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)
    landed_steps: list[bool] = field(default_factory=list)
    landed_settlements: list[bool] = field(default_factory=list)
    error: BaseException | None = None

    async def landed(self, position: int, *, settlement: bool = False) -> bool:
        """Wait for the flush; whether the step write (or ``settlement``) at ``position``
        landed."""
        await self.done.wait()
        if self.error is not None:
            raise self.error
        return (self.landed_settlements if settlement else self.landed_steps)[position]


@dataclass(eq=False, slots=True)
class _Owed:
    """A step's end written behind, and the flush that carries it (once one does)."""

    write: StepWrite
    batch: _Batch | None = None
    position: int = -1
    folded: bool = False
    """It goes out with its workflow's settlement instead."""


@dataclass(eq=False, slots=True)
class _Start:
    """A step try that began, and where its ``running`` row stands."""

    lease: Lease
    index: int
    name: str
    input: str
    began: float
    """When it began (``time.monotonic()``)."""
    path: str | None = None
    state: int = _UNWRITTEN
    written: anyio.Event | None = None
    """Set once a flush carrying its ``running`` row has ended."""


class GroupCommit:
    """What a worker's attempts write through: step rows and settlements go out in groups
    (their lease renewals and anything else go to the store directly)."""

    def __init__(self, store: GroupStore, *, step_row_after: float = 0.1) -> None:
        self.store = store
        self.step_row_after = step_row_after
        self.flushes = 0
        """How many flushes went out."""
        self.writes = 0
        """How many writes they carried."""
        self._batch = _Batch()
        self._ready = anyio.Event()
        self._starts: dict[str, dict[int, _Start]] = {}
        """The step tries begun and not ended, by workflow and step index."""
        self._unwritten: dict[tuple[str, int], _Start] = {}
        """The steps whose ``running`` row is not written, oldest first."""
        self._stepping: set[str] = set()
        """The workflows with step writes in the gathering batch."""
        self._owed: dict[str, list[_Owed]] = {}
        """The step ends each workflow has written behind and not seen commit."""
        self._unsent: list[_Owed] = []
        """Step ends for the next flush to carry."""

    # -- the writes of an attempt (the store's signatures) -------------------------------------

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        """A try of the step began (once the steps before it have committed): its
        ``running`` row is written if it runs long."""
        if lease.workflow_id in self._owed:
            await self._pay(lease)
        key = (lease.workflow_id, step_index)
        start = _Start(lease, step_index, step_name, input, time.monotonic(), path)
        self._starts.setdefault(lease.workflow_id, {})[step_index] = start
        if self.step_row_after <= 0:
            start.state, start.written = _WRITING, anyio.Event()
            try:
                landed = await self._write_step(self._running_row(start))
            finally:
                start.written.set()
            self._started(key, start, landed)
            if not landed:
                raise _lost(lease, f"recording step {step_index} ({step_name})")
            return
        self._unwritten[key] = start

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        """The step's try succeeded with ``output``."""
        await self._end_step(lease, step_index, StepStatus.SUCCEEDED, output=output)

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        """The step's try failed with ``error``."""
        await self._end_step(lease, step_index, StepStatus.FAILED, error=error)

    async def record_step(
        self,
        lease: Lease,
        step_index: int,
        step_name: str,
        input: str,
        output: str,
        *,
        path: str | None = None,
    ) -> None:
        """Record a durable primitive's result as a succeeded step; returns once it (and
        every step before it) has committed."""
        self._owe(
            StepWrite(
                lease,
                step_index,
                step_name,
                StepStatus.SUCCEEDED,
                input,
                output,
                new_try=False,
                path=path,
            )
        )
        await self._pay(lease)

    async def committed(self, lease: Lease) -> None:
        """Return once every write of the workflow of ``lease`` has committed (before an
        action that depends on them: a child start, a send)."""
        await self._pay(lease)

    async def suspend(self, lease: Lease, waits: Sequence[Wait]) -> bool:
        """Leave the workflow waiting (see :meth:`Store.suspend`), its steps committed first."""
        await self._pay(lease)
        return await self.store.suspend(lease, waits)

    async def receive(
        self,
        lease: Lease,
        topic: str,
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> str | None:
        """Take the next message as a step (see :meth:`Store.receive`), its steps committed
        first."""
        await self._pay(lease)
        return await self.store.receive(lease, topic, step_index, step_name, input, path=path)

    async def set_event(self, lease: Lease, key: str, value: str) -> None:
        """Publish an event (see :meth:`Store.set_event`), the steps before it committed."""
        await self._pay(lease)
        await self.store.set_event(lease, key, value)

    async def settle(self, settlement: Settlement) -> None:
        """End the attempt, with its last step's end when that is not sent yet; one whose
        parent may wait on it settles alone (the parent's row is locked first, in its own
        transaction), once its steps have committed."""
        lease = settlement.lease
        owed = self._owed.get(lease.workflow_id)
        last = None
        if (
            settlement.parent_id is None
            and owed is not None
            and len(owed) == 1
            and owed[0].batch is None
        ):
            last = owed[0]
            last.folded = True
            del self._owed[lease.workflow_id]
        else:
            await self._pay(lease)
        if settlement.parent_id is not None:
            await self.store.settle(settlement)
            return
        # One flush never writes a workflow's row and its step rows both.
        while lease.workflow_id in self._stepping:
            await self._batch.done.wait()
        batch = self._batch
        if last is not None:
            settlement = dataclasses.replace(settlement, step=last.write)
        batch.settlements.append(settlement)
        self._ready.set()
        if not await batch.landed(len(batch.settlements) - 1, settlement=True):
            raise _lost(lease, f"settling as {settlement.status.value}")

    def forget(self, workflow_id: str) -> None:
        """The attempt of ``workflow_id`` ended: drop the steps it left unended (its body
        was cancelled inside them)."""
        for index in self._starts.pop(workflow_id, {}):
            self._unwritten.pop((workflow_id, index), None)
        for owed in self._owed.pop(workflow_id, ()):
            owed.folded = True  # not sent: the attempt is over

    # -- flushing ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Flush what gathers, one flush at a time, and write the ``running`` rows of long
        steps, until cancelled."""
        async with anyio.create_task_group() as group:
            if self.step_row_after > 0:
                group.start_soon(self._write_long_steps)
            while True:
                await self._ready.wait()
                self._ready = anyio.Event()
                batch, self._batch = self._batch, _Batch()
                self._stepping.clear()
                for owed in self._unsent:
                    if owed.batch is None and not owed.folded:
                        owed.batch, owed.position = batch, len(batch.steps)
                        batch.steps.append(owed.write)
                self._unsent.clear()
                if batch.steps or batch.settlements:
                    await self._flush(batch)
                else:  # all it was woken for went out with an earlier flush, or was folded
                    batch.done.set()

    async def _flush(self, batch: _Batch) -> None:
        began = time.perf_counter()
        writes = len(batch.steps) + sum(2 if x.step else 1 for x in batch.settlements)
        try:
            batch.landed_steps, batch.landed_settlements = await self.store.write_batch(
                batch.steps, batch.settlements
            )
        except Exception as exc:  # each writer raises it (a StoreUnavailableError is retried)
            batch.error = exc
            for owed in self._unsent_after(batch):
                owed.batch = None  # sent again by the next flush
                self._unsent.append(owed)
            for settlement in batch.settlements:  # owed again, for the settle's retry to carry
                if settlement.step is not None:
                    workflow = settlement.lease.workflow_id
                    self._owed.setdefault(workflow, []).insert(0, _Owed(settlement.step))
        else:
            observers().durable_group_commit_flushed(
                writes=writes,
                steps=len(batch.steps),
                settlements=len(batch.settlements),
                seconds=time.perf_counter() - began,
            )
        self.flushes += 1
        self.writes += writes
        batch.done.set()

    async def _write_long_steps(self) -> None:
        """Write the ``running`` row of every step that has run ``step_row_after`` seconds."""
        while True:
            await anyio.sleep(self.step_row_after)
            now = time.monotonic()
            due: list[tuple[tuple[str, int], _Start]] = []
            for key, start in self._unwritten.items():
                if now - start.began < self.step_row_after:
                    break  # the rest began later
                due.append((key, start))
            if not due:
                continue
            batch, positions = self._batch, []
            for key, start in due:
                del self._unwritten[key]
                start.state, start.written = _WRITING, anyio.Event()
                positions.append(self._add_step(self._running_row(start)))
            self._ready.set()
            try:
                await batch.done.wait()
            finally:
                failed = batch.error is not None or not batch.done.is_set()
                for position, (key, start) in zip(positions, due, strict=True):
                    assert start.written is not None
                    start.written.set()
                    self._started(key, start, not failed and batch.landed_steps[position])
                    if failed and start.state == _UNWRITTEN:
                        self._unwritten[key] = start  # tried again at the next tick

    def _started(self, key: tuple[str, int], start: _Start, landed: bool) -> None:
        """A flush carrying the ``running`` row of ``start`` ended; ``landed`` says how."""
        if landed:
            start.state = _WRITTEN
        elif self._starts.get(key[0], {}).get(key[1]) is start:
            start.state = _UNWRITTEN

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _running_row(start: _Start) -> StepWrite:
        return StepWrite(
            start.lease,
            start.index,
            start.name,
            StepStatus.RUNNING,
            start.input,
            began=start.began,
            path=start.path,
        )

    async def _end_step(
        self,
        lease: Lease,
        index: int,
        status: StepStatus,
        *,
        output: str | None = None,
        error: str | None = None,
    ) -> None:
        key = (lease.workflow_id, index)
        begun = self._starts.get(lease.workflow_id, {})
        start = begun.get(index)
        if start is None:
            raise _lost(lease, f"ending step {index}, which did not begin under this lease")
        if start.state == _WRITING:
            assert start.written is not None
            await start.written.wait()
        begun.pop(index, None)
        if not begun:
            self._starts.pop(lease.workflow_id, None)
        self._unwritten.pop(key, None)
        new_try = start.state != _WRITTEN
        self._owe(
            StepWrite(
                lease,
                index,
                start.name,
                status,
                start.input,
                output,
                error,
                new_try,
                start.began,
                start.path,
            )
        )

    def _owe(self, write: StepWrite) -> None:
        """Write ``write`` behind: the next flush carries it; :meth:`_pay` waits for it."""
        owed = _Owed(write)
        self._owed.setdefault(write.lease.workflow_id, []).append(owed)
        self._unsent.append(owed)
        self._ready.set()

    async def _pay(self, lease: Lease) -> None:
        """Return once every step end the workflow of ``lease`` wrote behind has committed;
        :class:`LeaseLostError` if one was refused (a failed flush's error is raised, and
        the write goes out again with the next)."""
        workflow = lease.workflow_id
        while owed := self._owed.get(workflow):
            first = owed[0]
            if first.batch is None:  # the next flush carries it
                self._ready.set()
                gathering = self._batch
                await gathering.done.wait()
                if gathering.error is not None:
                    raise gathering.error
                continue
            landed = await first.batch.landed(first.position)
            if owed and owed[0] is first:
                owed.pop(0)
                if not owed:
                    self._owed.pop(workflow, None)
            if not landed:
                write = first.write
                raise _lost(lease, f"{write.status.value} step {write.index} ({write.name})")

    def _unsent_after(self, batch: _Batch) -> list[_Owed]:
        """The step ends ``batch`` carried that their workflows still owe."""
        return [owed for owes in self._owed.values() for owed in owes if owed.batch is batch]

    def _add_step(self, write: StepWrite) -> int:
        """Add ``write`` to the gathering batch; its position there."""
        batch = self._batch
        batch.steps.append(write)
        self._stepping.add(write.lease.workflow_id)
        return len(batch.steps) - 1

    async def _write_step(self, write: StepWrite) -> bool:
        batch = self._batch
        position = self._add_step(write)
        self._ready.set()
        return await batch.landed(position)


def _lost(lease: Lease, what: str) -> LeaseLostError:
    return LeaseLostError.refused(lease.worker_id, lease.workflow_id, what)


def group_commit(store: Store, *, step_row_after: float) -> GroupCommit | None:
    """A :class:`GroupCommit` over ``store`` when it can batch writes, else ``None``."""
    if isinstance(store, BatchWriter):
        return GroupCommit(store, step_row_after=step_row_after)
    return None
