"""The memory store's talk with running workflows and its searchable attributes: streams,
updates, attributes, and debounced starts.

The rules are :mod:`durable_core.sql.streams`', :mod:`durable_core.sql.updates`',
:mod:`durable_core.sql.attributes`' and :mod:`durable_core.sql.debounce`'s. A stream
write or an update's reply wakes the watches of its workflow at once (an
:class:`anyio.Event` each), so readers and callers do not poll.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import anyio

from ..errors import (
    StreamClosedError,
    UpdateConflictError,
    UpdateNotHandledError,
    WorkflowNotFoundError,
)
from ..seams.attributes import (
    AttributeFilter,
    AttributeRange,
    AttributeValue,
    check_attributes,
    check_filters,
    kind_of,
)
from ..seams.records import (
    BodyCall,
    Lease,
    NewWorkflow,
    StreamPage,
    UpdateRecord,
    UpdateStatus,
    WaitKind,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.talk_roles import Watch, check_key
from ..sql.repeats import unique_starts
from ..sql.rows import record_from_row
from .reading import ReadOperations, given_filters
from .tables import Row, matches, newest_first, now

CROSS_THREAD_POLL = 0.05
"""How often a watch looks for a write made on another thread (whose event it cannot set)."""


class EventWatch:
    """A watch woken by its workflow's stream writes and update replies in this process: at
    once by a write on its own thread, within :data:`CROSS_THREAD_POLL` by one on another
    (an instance sharing the tables, on another event loop)."""

    notified = True

    def __init__(self, watches: list[EventWatch]) -> None:
        self._watches = watches
        self._event = anyio.Event()
        self._woken = False
        self._thread = threading.get_ident()
        watches.append(self)

    def wake(self) -> None:
        """A write of its workflow happened (called under the tables' lock)."""
        self._woken = True
        if threading.get_ident() == self._thread:
            self._event.set()

    async def wait(self, timeout: float) -> None:
        """Return on a write since the last wait, or after ``timeout`` seconds."""
        deadline = anyio.current_time() + max(timeout, 0.0)
        while not self._woken:
            left = deadline - anyio.current_time()
            if left <= 0:
                break
            with anyio.move_on_after(min(left, CROSS_THREAD_POLL)):
                await self._event.wait()
        self._woken = False
        self._event = anyio.Event()

    async def close(self) -> None:
        """Stop watching."""
        if self in self._watches:
            self._watches.remove(self)


class TalkOperations(ReadOperations):
    """Streams, updates, attributes, debounce."""

    def _watches(self, workflow_id: str) -> list[EventWatch]:
        watches: list[EventWatch] = self.tables.watches.setdefault(workflow_id, [])
        return watches

    def _announce(self, workflow_id: str) -> None:
        for watch in list(self._watches(workflow_id)):
            watch.wake()

    def watch(self, workflow_id: str) -> Watch:
        """A watch of ``workflow_id``'s stream writes and update replies."""
        return EventWatch(self._watches(workflow_id))

    # -- streams -----------------------------------------------------------------------------

    async def write_stream(
        self,
        lease: Lease,
        key: str,
        value: str | None,
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> int:
        """Append ``value`` (``None``: close the key) at ``key``'s next offset and record the
        step with that offset as its output, at once; the offset."""
        check_key(key)
        what = f"writing stream {key!r}"
        t = await self._begin()
        with t.lock:
            self._fence(t, lease, what)
            entries = t.streams.get((lease.workflow_id, key), [])
            if entries and entries[-1]["value"] is None:
                raise StreamClosedError(
                    f"workflow {lease.workflow_id} wrote to stream {key!r} after closing it"
                )
            at = now()
            offset = len(entries)
            call = BodyCall(lease, step_index, step_name, input, str(offset), path)
            self._record_call(t, call, what, at)
            t.streams.setdefault((lease.workflow_id, key), []).append(
                {"stream_offset": offset, "value": value, "written_at": at}
            )
            self._announce(lease.workflow_id)
        return offset

    async def read_stream(
        self, workflow_id: str, key: str, offset: int = 0, limit: int = 1000
    ) -> StreamPage:
        """At most ``limit`` entries of ``key`` from ``offset`` on, and whether it is closed."""
        t = await self._begin()
        with t.lock:
            found = t.streams.get((workflow_id, key), [])
            entries = [
                (e["stream_offset"], e["value"]) for e in found[max(offset, 0) :][: max(limit, 0)]
            ]
        closed = bool(entries) and entries[-1][1] is None
        if closed:
            entries.pop()
        return StreamPage(entries, closed)

    # -- updates -----------------------------------------------------------------------------

    async def send_update(
        self, workflow_id: str, update_id: str, name: str, payload: str
    ) -> UpdateRecord:
        """Add the update unless its id is there (then the same request must repeat) and
        wake the workflow if it waits on ``name``; the update as it stands."""
        t = await self._begin()
        with t.lock:
            row = t.workflows.get(workflow_id)
            if row is None:
                raise WorkflowNotFoundError(
                    f"cannot update workflow {workflow_id!r}: no such workflow in "
                    f"{self.description}"
                )
            mine = t.updates.setdefault(workflow_id, {})
            existing = mine.get(update_id)
            if existing is not None:
                record = _update(workflow_id, existing)
                if (record.name, json.loads(record.payload)) != (name, json.loads(payload)):
                    raise UpdateConflictError(
                        f"update {update_id!r} of workflow {workflow_id} was sent as "
                        f"{record.name!r} with another payload; an update id names one request"
                    )
                return record
            status = WorkflowStatus(row["status"])
            if status.is_terminal:
                raise UpdateNotHandledError(
                    f"cannot update workflow {workflow_id}: it is {status.value}"
                )
            at = now()
            mine[update_id] = {
                "update_id": update_id,
                "name": name,
                "payload": payload,
                "status": UpdateStatus.PENDING.value,
                "reply": None,
                "error": None,
                "sent_at": at,
                "replied_at": None,
            }
            self._wake(t, workflow_id, f"{WaitKind.UPDATE.value}:{name}", at)
        return UpdateRecord(workflow_id, update_id, name, payload, UpdateStatus.PENDING, None, None)

    async def get_update(self, workflow_id: str, update_id: str) -> UpdateRecord | None:
        """The update, or ``None``."""
        t = await self._begin()
        with t.lock:
            found = t.updates.get(workflow_id, {}).get(update_id)
            return None if found is None else _update(workflow_id, found)

    async def next_update(self, workflow_id: str, name: str) -> UpdateRecord | None:
        """The oldest pending update of ``name``, or ``None``."""
        t = await self._begin()
        with t.lock:
            for found in t.updates.get(workflow_id, {}).values():
                if found["name"] == name and found["status"] == UpdateStatus.PENDING.value:
                    return _update(workflow_id, found)
        return None

    async def take_update(
        self,
        lease: Lease,
        update_id: str,
        step_index: int,
        step_name: str,
        input: str,
        output: str,
        *,
        path: str | None = None,
    ) -> bool:
        """Mark the pending update taken and record the receiving step, at once, fenced by
        ``lease``; False (nothing written) if it is not pending."""
        what = f"taking update {update_id!r}"
        t = await self._begin()
        with t.lock:
            self._fence(t, lease, what)
            found = t.updates.get(lease.workflow_id, {}).get(update_id)
            if found is None or found["status"] != UpdateStatus.PENDING.value:
                return False
            call = BodyCall(lease, step_index, step_name, input, output, path)
            self._record_call(t, call, what, now())
            found["status"] = UpdateStatus.TAKEN.value
        return True

    async def reject_update(self, lease: Lease, update_id: str, error: str) -> None:
        """Mark the pending update rejected with ``error`` (fenced by ``lease``)."""
        await self._answer(
            lease, update_id, UpdateStatus.PENDING, UpdateStatus.REJECTED, "error", error
        )

    async def reply_update(
        self, lease: Lease, update_id: str, reply: str, *, call: BodyCall | None = None
    ) -> None:
        """Record ``reply`` to the taken update (with ``call``, the body's call, at once); a
        second reply changes nothing."""
        await self._answer(
            lease, update_id, UpdateStatus.TAKEN, UpdateStatus.REPLIED, "reply", reply, call
        )

    async def _answer(
        self,
        lease: Lease,
        update_id: str,
        was: UpdateStatus,
        becomes: UpdateStatus,
        column: str,
        value: str,
        call: BodyCall | None = None,
    ) -> None:
        what = f"answering update {update_id!r}"
        t = await self._begin()
        with t.lock:
            self._fence(t, lease, what)
            at = now()
            if call is not None:
                self._record_call(t, call, what, at)
            found = t.updates.get(lease.workflow_id, {}).get(update_id)
            if found is not None and found["status"] == was.value:
                found.update({"status": becomes.value, column: value, "replied_at": at})
                if becomes is UpdateStatus.REPLIED:
                    self._announce(lease.workflow_id)

    # -- attributes --------------------------------------------------------------------------

    async def record_attributes(
        self,
        lease: Lease,
        values: Mapping[str, AttributeValue | None],
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> None:
        """Set (``None``: remove) the held workflow's attributes and record the call's step,
        at once, fenced by ``lease``."""
        checked = check_attributes(values)
        call = BodyCall(lease, step_index, step_name, input, "null", path)
        t = await self._begin()
        with t.lock:
            self._record_call(t, call, "setting attributes", now())
            self._write_attributes(t, lease.workflow_id, checked)

    async def set_attributes(
        self, workflow_id: str, values: Mapping[str, AttributeValue | None]
    ) -> None:
        """Set (``None``: remove) ``workflow_id``'s attributes, whatever its state."""
        checked = check_attributes(values)
        t = await self._begin()
        with t.lock:
            if workflow_id not in t.workflows:
                raise WorkflowNotFoundError(
                    f"no workflow with id {workflow_id!r} in {self.description}"
                )
            self._write_attributes(t, workflow_id, checked)

    async def get_attributes(self, workflow_id: str) -> dict[str, AttributeValue]:
        """``workflow_id``'s attributes by name; a whole number reads back as an ``int``."""
        t = await self._begin()
        with t.lock:
            found = dict(t.attributes.get(workflow_id, {}))
        return {
            name: int(value) if isinstance(value, float) and value.is_integer() else value
            for name, value in sorted(found.items())
        }

    async def list_by_attributes(
        self,
        attributes: Mapping[str, AttributeFilter],
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
    ) -> list[WorkflowRecord]:
        """The newest workflows first whose attributes pass every filter of ``attributes``,
        further filtered as ``list_workflows`` is."""
        wanted = check_filters(attributes)
        filters = given_filters(
            status=status,
            name=name,
            queue=queue,
            parent_id=parent_id,
            error_type=error_type,
            created_after=created_after,
            created_before=created_before,
            before=before,
        )
        t = await self._begin()
        with t.lock:
            cursor = t.workflows.get(before) if before is not None else None
            rows = [
                row
                for workflow_id, mine in t.attributes.items()
                if all(_passes(mine.get(n), w) for n, w in wanted.items())
                and (row := t.workflows.get(workflow_id)) is not None
                and matches(row, filters, cursor)
            ]
            return [record_from_row(row) for row in newest_first(rows)[: max(limit, 0)]]

    # -- debounce ----------------------------------------------------------------------------

    async def debounce(
        self,
        workflow: NewWorkflow,
        key: str,
        window_seconds: float,
        max_wait_seconds: float | None,
    ) -> tuple[str, bool]:
        """See :meth:`~durable_core.seams.store.Debouncer.debounce`."""
        first = (
            window_seconds if max_wait_seconds is None else min(window_seconds, max_wait_seconds)
        )
        delayed = replace(workflow, delay_seconds=first)
        t = await self._begin()
        with t.lock:
            fresh = self._check_new(t, unique_starts([delayed]))
            at = now()
            window = t.debounces.get((workflow.name, key))
            if window is not None and window["workflow_id"] != workflow.id:
                run = t.workflows.get(window["workflow_id"])
                if run is not None and _not_started(run):
                    later = at + timedelta(seconds=float(window_seconds))
                    cap = window["last_at"]
                    run_at = cap if cap is not None and cap < later else later
                    run.update(input=workflow.input, run_at=run_at, updated_at=at)
                    window["fire_at"] = run_at
                    return run["id"], False
            self._insert(t, fresh, at)
            if window is not None and window["workflow_id"] == workflow.id:
                return workflow.id, True
            t.debounces[(workflow.name, key)] = {
                "workflow_id": workflow.id,
                "fire_at": at + timedelta(seconds=float(first)),
                "first_at": at,
                "last_at": None
                if max_wait_seconds is None
                else at + timedelta(seconds=float(max_wait_seconds)),
            }
            return workflow.id, True


def _not_started(row: Row) -> bool:
    """A debounced run whose input may still change: pending, never leased."""
    return row["status"] == WorkflowStatus.PENDING.value and row["started_at"] is None


def _passes(value: Any, wanted: AttributeFilter) -> bool:
    """Whether an attribute's stored ``value`` passes a filter (of its own type only)."""
    if value is None:
        return False
    if isinstance(wanted, AttributeRange):
        if kind_of(value) != "number":
            return False
        return (wanted.min is None or value >= wanted.min) and (
            wanted.max is None or value <= wanted.max
        )
    if kind_of(value) != kind_of(wanted):
        return False
    return bool(value == (float(wanted) if kind_of(wanted) == "number" else wanted))


def _update(workflow_id: str, row: Row) -> UpdateRecord:
    return UpdateRecord(
        workflow_id=workflow_id,
        update_id=row["update_id"],
        name=row["name"],
        payload=row["payload"],
        status=UpdateStatus(row["status"]),
        reply=row["reply"],
        error=row["error"],
    )


__all__ = ["EventWatch", "TalkOperations"]
