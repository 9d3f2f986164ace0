"""``GroupCommit``: the writes of a worker's in-flight attempts, committed together.

A durable step only has to be committed before the workflow goes on, not in a
transaction of its own. Every step row and settlement the worker's attempts write
is handed to one flusher, and the workflow goes on only once its write has committed;
the flusher sends everything handed to it since its last flush as one statement
(:meth:`~durable_core.seams.store.BatchWriter.write_batch`), each row fenced by its own
lease, while the next flush gathers. A lone write goes out at once: no timer delays
it. With ``flushes_in_flight`` above 1 (pipelining), a flush may go out while another
is in flight, once its batch holds ``flush_min_batch`` writes (or none is in flight),
so that the worker's Python and the database work at once without flushes shrinking
to a handful of writes; a workflow's writes still commit one after another, since
each waits for its earlier ones before it is handed over. The writer that fills a
batch to that minimum sends it from its own task: workflows that resume together
from one flush would otherwise all run before the flusher's task, and every flush
would carry all their writes while the database waited.

Every write waits on one plain future per batch (resolved once the flush ended), and
a write that does not have to wait (a step's start, a step's end written behind)
returns without yielding to the event loop.

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

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol

import anyio

from ..errors import LeaseLostError, StoreUnavailableError
from ..seams.plugins import observers
from ..seams.records import (
    BodyCall,
    Lease,
    NewWorkflow,
    Settlement,
    StepStatus,
    StepWrite,
    Wait,
)
from ..seams.store import BatchWriter, Store
from .batches import WRITING, WRITTEN, Batch, Owed, Start, with_step
from .flight import shield
from .step_tries import StepTries


class GroupStore(Store, BatchWriter, Protocol):
    """A store that commits writes in groups (PostgreSQL's)."""


class GroupCommit:
    """What a worker's attempts write through: step rows and settlements go out in groups
    (their lease renewals and anything else go to the store directly)."""

    def __init__(
        self,
        store: GroupStore,
        *,
        step_row_after: float = 0.1,
        flushes_in_flight: int = 1,
        flush_min_batch: int = 1,
    ) -> None:
        self.store = store
        self.step_row_after = step_row_after
        self.flushes_in_flight = max(1, flushes_in_flight)
        """How many flushes may be in flight at once (1: each waits for the one before)."""
        self.flush_min_batch = max(1, flush_min_batch)
        """With a flush in flight, the writes the next batch gathers before it goes out."""
        self.flushes = 0
        """How many flushes went out."""
        self.writes = 0
        """How many writes they carried."""
        self._batch = Batch()
        self._wake: asyncio.Event | None = None
        """Set when the flusher has something to look at (a write, a flush's end)."""
        self._pending = False
        self._stopped = False
        """The flusher has stopped (the worker is cancelled): a write handed over now fails
        at once, as a flush cut short does, instead of waiting for a flush that never comes."""
        self._in_flight = 0
        self._tries = StepTries()
        self._stepping: set[str] = set()
        """The workflows with step writes in the gathering batch."""
        self._owed: dict[str, list[Owed]] = {}
        """The step ends each workflow has written behind and not seen commit."""
        self._unsent: list[Owed] = []
        """Step ends for the next flush to carry."""

    # -- the writes of an attempt (the store's signatures) -------------------------------------

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        """A try of the step began (once the steps before it have committed): its
        ``running`` row is written if it runs long."""
        if lease.workflow_id in self._owed:
            await self._pay(lease)
        late = self.step_row_after > 0
        start = self._tries.begin(lease, step_index, step_name, input, path, row_late=late)
        if not late:
            batch = self._carry([start])
            await batch.flushed()
            if batch.error is not None:
                raise batch.error
            if start.state != WRITTEN:
                raise _lost(lease, f"recording step {step_index} ({step_name})")

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

    async def writes_elsewhere(self, lease: Lease, step_index: int) -> bool:
        """The end of the try of step ``step_index`` is written by the caller's own
        transaction (a transaction step on the store's database): its ``running`` row is no
        longer written here (one in flight is waited for, so it cannot land after that
        transaction's row). Whether it was written."""
        start = self._begun(lease, step_index)
        if start.state == WRITING:
            assert start.carrier is not None
            await start.carrier.flushed()
        self._tries.unlist(start)
        return start.state == WRITTEN

    def ended_elsewhere(self, lease: Lease, step_index: int) -> None:
        """The transaction that wrote the end of the try of step ``step_index`` committed:
        the try is over, with nothing to write here."""
        start = self._tries.get(lease, step_index)
        if start is not None:
            self._tries.end(start, StepStatus.SUCCEEDED, None, None)

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

    async def set_event(
        self, lease: Lease, key: str, value: str, *, call: BodyCall | None = None
    ) -> None:
        """Publish an event (see :meth:`Store.set_event`), the steps before it committed."""
        await self._pay(lease)
        await self.store.set_event(lease, key, value, call=call)

    async def send_from(
        self, call: BodyCall, workflow_id: str, topic: str, payload: str, message_id: str
    ) -> None:
        """A body's send (see :meth:`Store.send_from`), the steps before it committed."""
        await self._pay(call.lease)
        await self.store.send_from(call, workflow_id, topic, payload, message_id)

    async def enqueue_from(self, call: BodyCall, workflows: Sequence[NewWorkflow]) -> Sequence[str]:
        """A body's start (see :meth:`Store.enqueue_from`), the steps before it committed."""
        await self._pay(call.lease)
        return await self.store.enqueue_from(call, workflows)

    async def settle(self, settlement: Settlement) -> None:
        """End the attempt, with its last step's end when that is not sent yet; one whose
        parent may wait on it settles alone (the parent's row is locked first, in its own
        transaction), once its steps have committed."""
        lease = settlement.lease
        workflow = lease.workflow_id
        owed = self._owed.get(workflow)
        if (
            settlement.parent_id is None
            and owed is not None
            and len(owed) == 1
            and owed[0].batch is None
        ):
            last = owed[0]
            last.folded = True
            del self._owed[workflow]
            settlement = with_step(settlement, last.write)
        elif owed is not None:
            await self._pay(lease)
        if settlement.parent_id is not None:
            await self.store.settle(settlement)
            return
        # One flush never writes a workflow's row and its step rows both.
        while workflow in self._stepping:
            await self._batch.flushed()
        batch = self._batch
        batch.settlements.append(settlement)
        await self._hand_over()
        if not await batch.landed(len(batch.settlements) - 1, settlement=True):
            raise _lost(lease, f"settling as {settlement.status.value}")

    def forget(self, workflow_id: str) -> None:
        """The attempt of ``workflow_id`` ended: drop the steps it left unended (its body
        was cancelled inside them)."""
        self._tries.forget(workflow_id)
        for owed in self._owed.pop(workflow_id, ()):
            owed.folded = True  # not sent: the attempt is over

    # -- flushing ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Flush what gathers (up to ``flushes_in_flight`` flushes at once), and write the
        ``running`` rows of long steps, until cancelled; then fail what still gathers."""
        wake = self._wake = asyncio.Event()
        self._stopped = False
        if self._pending:
            wake.set()
        try:
            async with anyio.create_task_group() as group:
                if self.step_row_after > 0:
                    group.start_soon(self._write_long_steps)
                while True:
                    await wake.wait()
                    wake.clear()
                    if self._in_flight >= self.flushes_in_flight:
                        continue  # a flush's end wakes this again
                    if self._in_flight and self._gathered() < self.flush_min_batch:
                        continue  # the next write or a flush's end looks again
                    batch = self._take()
                    if batch is not None and self.flushes_in_flight == 1:
                        await self._flush(batch)
                    elif batch is not None:
                        self._in_flight += 1
                        group.start_soon(self._flush, batch)
        finally:
            self._wake, self._stopped = None, True
            self._fail_gathering()

    def _take(self) -> Batch | None:
        """The gathering batch, with the step ends owed, to flush now (a new one gathers);
        ``None`` when it holds nothing (all it was woken for went out with an earlier
        flush, or was folded)."""
        batch, self._batch = self._batch, Batch()
        self._stepping.clear()
        for owed in self._unsent:
            if owed.batch is None and not owed.folded:
                owed.batch, owed.position = batch, len(batch.steps)
                batch.steps.append(owed.write)
        self._unsent.clear()
        if not (batch.steps or batch.settlements):
            batch.end()
            return None
        return batch

    async def _hand_over(self) -> None:
        """A write joined the gathering batch: when pipelining and the batch holds the
        minimum, send it from the writer's own task, at once, so its query goes out while
        the other attempts' Python still runs (the flusher's task would only run after
        all of them: the database would wait for the worker, then the worker for the
        database); else wake the flusher. Shielded (but for the worker abandoning its
        workflows, which cuts the flush short as it cancels the flusher's): the flush is
        every writer's in it, not this one's."""
        if not (
            self.flushes_in_flight > 1
            and self._in_flight < self.flushes_in_flight
            and self._gathered() >= self.flush_min_batch
        ):
            self._ready()
            return
        taken = self._take()
        if taken is None:
            return
        self._in_flight += 1
        with shield():
            await self._flush(taken)

    def _gathered(self) -> int:
        """How many writes the next flush would carry."""
        batch = self._batch
        unsent = sum(1 for owed in self._unsent if owed.batch is None and not owed.folded)
        return len(batch.steps) + len(batch.settlements) + unsent

    def _ready(self) -> None:
        """Something was handed over: wake the flusher (fail it, once the flusher stopped)."""
        wake = self._wake
        if wake is not None:
            wake.set()
        elif self._stopped:
            self._fail_gathering()
        else:
            self._pending = True

    def _fail_gathering(self) -> None:
        """End the gathering batch unsent, its writes failed as those of a flush cut short:
        the flusher has stopped, and a waiter on a batch cannot be cancelled before it ends."""
        batch, self._batch = self._batch, Batch()
        self._stepping.clear()
        batch.error = _cut_short()
        batch.end()

    async def _flush(self, batch: Batch) -> None:
        began = time.perf_counter()
        writes = len(batch.steps) + sum(2 if x.step else 1 for x in batch.settlements)
        try:
            landed = await self.store.write_batch(batch.steps, batch.settlements)
        except Exception as exc:  # each writer raises it (a StoreUnavailableError is retried)
            batch.error = exc
            for owed in self._unsent_after(batch):
                owed.batch = None  # sent again by the next flush
                self._unsent.append(owed)
            for settlement in batch.settlements:  # owed again, for the settle's retry to carry
                if settlement.step is not None:
                    workflow = settlement.lease.workflow_id
                    self._owed.setdefault(workflow, []).insert(0, Owed(settlement.step))
        except BaseException:  # cancelled (the worker stops): no write waits on it forever
            batch.error = _cut_short()
            batch.end()
            raise
        else:
            batch.landed_steps, batch.landed_settlements = landed
            observers().durable_group_commit_flushed(
                writes=writes,
                steps=len(batch.steps),
                settlements=len(batch.settlements),
                seconds=time.perf_counter() - began,
            )
        finally:
            if self.flushes_in_flight > 1:
                self._in_flight -= 1
                self._ready()
        self._tries.written(batch, again=self.step_row_after > 0)
        self.flushes += 1
        self.writes += writes
        batch.end()

    async def _write_long_steps(self) -> None:
        """Write the ``running`` row of every step that has run ``step_row_after`` seconds."""
        while True:
            await anyio.sleep(self.step_row_after)
            due = self._tries.due(self.step_row_after)
            if due:
                self._carry(due)

    def _carry(self, starts: list[Start]) -> Batch:
        """Put the ``running`` rows of ``starts`` in the gathering batch; that batch."""
        batch = self._batch
        for start in starts:
            start.state, start.carrier = WRITING, batch
            batch.starts.append((self._add_step(StepTries.running_row(start)), start))
        self._ready()
        return batch

    # -- helpers -------------------------------------------------------------------------------

    async def _end_step(
        self,
        lease: Lease,
        index: int,
        status: StepStatus,
        *,
        output: str | None = None,
        error: str | None = None,
    ) -> None:
        start = self._begun(lease, index)
        if start.state == WRITING:
            assert start.carrier is not None
            await start.carrier.flushed()
        self._end(start, status, output, error)

    def _begun(self, lease: Lease, index: int) -> Start:
        """The try of step ``index`` that began under ``lease``."""
        start = self._tries.get(lease, index)
        if start is None:
            raise _lost(lease, f"ending step {index}, which did not begin under this lease")
        return start

    def _end(self, start: Start, status: StepStatus, output: str | None, error: str | None) -> None:
        """End the try ``start``: its end is written behind."""
        self._owe(self._tries.end(start, status, output, error))

    # -- the short path: a step's start and end that need not wait -----------------------------

    def began_now(
        self, lease: Lease, step_index: int, step_name: str, input: str, path: str | None
    ) -> bool:
        """:meth:`start_step` at once, without a coroutine, when it would not wait (the
        workflow owes no write and running rows are written late); ``False`` (nothing
        done) otherwise."""
        if self.step_row_after <= 0 or lease.workflow_id in self._owed:
            return False
        self._tries.begin(lease, step_index, step_name, input, path, row_late=True)
        return True

    def completed_now(self, lease: Lease, step_index: int, output: str) -> bool:
        """:meth:`complete_step` at once, without a coroutine, when it would not wait (the
        step's ``running`` row is not being written); ``False`` (nothing done) otherwise."""
        start = self._tries.get(lease, step_index)
        if start is None or start.state == WRITING:
            return False  # (a step that did not begin is refused by complete_step)
        self._end(start, StepStatus.SUCCEEDED, output, None)
        return True

    def _owe(self, write: StepWrite) -> None:
        """Write ``write`` behind: the next flush carries it; :meth:`_pay` waits for it."""
        owed = Owed(write)
        self._owed.setdefault(write.lease.workflow_id, []).append(owed)
        self._unsent.append(owed)
        self._ready()

    async def _pay(self, lease: Lease) -> None:
        """Return once every step end the workflow of ``lease`` wrote behind has committed;
        :class:`LeaseLostError` if one was refused (a failed flush's error is raised, and
        the write goes out again with the next)."""
        workflow = lease.workflow_id
        while owed := self._owed.get(workflow):
            first = owed[0]
            if first.batch is None:  # the next flush carries it
                gathering = self._batch
                await self._hand_over()
                await gathering.flushed()
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

    def _unsent_after(self, batch: Batch) -> list[Owed]:
        """The step ends ``batch`` carried that their workflows still owe."""
        return [owed for owes in self._owed.values() for owed in owes if owed.batch is batch]

    def _add_step(self, write: StepWrite) -> int:
        """Add ``write`` to the gathering batch; its position there."""
        batch = self._batch
        batch.steps.append(write)
        self._stepping.add(write.lease.workflow_id)
        return len(batch.steps) - 1


def _cut_short() -> StoreUnavailableError:
    return StoreUnavailableError("the group commit stopped before this write")


def _lost(lease: Lease, what: str) -> LeaseLostError:
    return LeaseLostError.refused(lease.worker_id, lease.workflow_id, what)


def group_commit(
    store: Store,
    *,
    step_row_after: float,
    flushes_in_flight: int = 1,
    flush_min_batch: int = 1,
) -> GroupCommit | None:
    """A :class:`GroupCommit` over ``store`` when it can batch writes, else ``None``."""
    if isinstance(store, BatchWriter):
        return GroupCommit(
            store,
            step_row_after=step_row_after,
            flushes_in_flight=flushes_in_flight,
            flush_min_batch=flush_min_batch,
        )
    return None
