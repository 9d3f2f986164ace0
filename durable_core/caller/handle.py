"""``WorkflowHandle``: poll, wait on and read the result of one workflow instance."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast, overload

import anyio

from .. import durations
from ..codec import convert, decode
from ..codec.failures import load_error, recorded_exception
from ..errors import (
    InvalidStateError,
    StoreUnavailableError,
    WaitTimeoutError,
    WorkflowNotFinishedError,
    WorkflowNotFoundError,
)
from ..primitives.attributes import merged
from ..primitives.streams import read_stream
from ..runtime.context import body_context, body_effect
from ..seams.attributes import AttributeValue, attributes_of, check_attributes
from ..seams.records import AttemptRecord, StepRecord, StepTryRecord, WorkflowRecord, WorkflowStatus
from ..seams.roles import CallerStore, admin_of, describe
from .oncall import why_pending

R = TypeVar("R")
T = TypeVar("T")

DEFAULT_POLL_SECONDS = 0.1
EVENT_POLL_SECONDS = 0.05


def _seconds(value: float | timedelta | None, what: str) -> float | None:
    return None if value is None else durations.seconds(value, what)


@dataclass(frozen=True)
class _Outcome:
    """How a workflow settled, as a parent's body recorded it."""

    status: WorkflowStatus
    output: str | None
    error: str | None


class WorkflowHandle(Generic[R]):
    """Refers to one enqueued workflow instance by id."""

    def __init__(self, store: CallerStore, workflow_id: str, name: str | None = None) -> None:
        self.store = store
        self.id = workflow_id
        self.name = name

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.name or 'workflow'} {self.id}>"

    async def info(self) -> WorkflowRecord:
        """The whole row: status, attempts, output, error, times."""
        record = await self.store.get_workflow(self.id)
        if record is None:
            raise WorkflowNotFoundError(
                f"no workflow with id {self.id!r} in {describe(self.store)}"
            )
        return record

    async def status(self) -> WorkflowStatus:
        """The live status of the workflow."""
        return (await self.info()).status

    async def set_attributes(
        self,
        values: Mapping[str, AttributeValue | None] | None = None,
        /,
        **more: AttributeValue | None,
    ) -> None:
        """Set the workflow's searchable attributes, whatever its state (``None`` removes a
        name): ``await handle.set_attributes(region="eu")``. From a workflow body, once per
        call site. Raises :class:`WorkflowNotFoundError` for an unknown workflow."""
        checked = check_attributes(merged(values, more))
        store = attributes_of(self.store)

        async def write() -> str:
            await store.set_attributes(self.id, checked)
            return "null"

        await body_effect("durable.set_attributes_of", [self.id, sorted(checked)], write)

    async def attributes(self) -> dict[str, AttributeValue]:
        """The workflow's searchable attributes, by name (a whole number as an ``int``)."""
        return await attributes_of(self.store).get_attributes(self.id)

    async def steps(self) -> list[StepRecord]:
        """The recorded steps, in index order."""
        return await self.store.load_steps(self.id)

    async def step_tries(self) -> list[StepTryRecord]:
        """Every failed try of its steps, oldest first: the step's index, the try's number,
        when it began and ended, and its error."""
        return await self.store.load_step_tries(self.id)

    async def attempts(self) -> list[AttemptRecord]:
        """Every ended attempt, oldest first: its number, worker, start, end, outcome
        (``succeeded``, ``failed``, ``retry``, ``cancelled``, ``timed_out``, ``crashed``)
        and error."""
        return await self.store.load_attempts(self.id)

    async def wait(self) -> WorkflowStatus:
        """Wait, however long it takes, for a terminal status. Prefer :meth:`wait_with_timeout`."""
        return await self.wait_with_options()

    async def wait_with_timeout(self, timeout: float | timedelta) -> WorkflowStatus:
        """Wait at most ``timeout`` for a terminal status.

        Raises :class:`WaitTimeoutError` (also a ``TimeoutError``) on time, even if a
        status query is stalled. The workflow is not cancelled.
        """
        return await self.wait_with_options(
            deadline=durations.seconds(timeout, "wait_with_timeout timeout")
        )

    async def wait_with_options(
        self,
        poll: float | timedelta | None = None,
        deadline: float | timedelta | None = None,
    ) -> WorkflowStatus:
        """Wait for a terminal status, polling every ``poll`` for at most ``deadline``.

        In a workflow body the wait is durable: the workflow suspends, holding no
        worker slot, until this one settles (or the deadline passes). Outside one, a
        database out of reach for a while (a restart, a failover) is waited out.
        """
        poll_seconds = _seconds(poll, "wait_with_options poll") or DEFAULT_POLL_SECONDS
        deadline_seconds = _seconds(deadline, "wait_with_options deadline")
        if self._in_body():
            settled = await self._settled(deadline_seconds)
            if settled is None:
                raise WaitTimeoutError(
                    f"Timed out after {deadline_seconds}s waiting for workflow {self.id}. "
                    "It was not cancelled."
                )
            return settled.status
        last: list[WorkflowStatus] = []
        if deadline_seconds == 0:
            # A zero deadline means "look once", not "give up before looking".
            status = await self.status()
            if status.is_terminal:
                return status
            last.append(status)
        try:
            with anyio.fail_after(deadline_seconds):
                while True:
                    try:
                        status = await self.status()
                    except StoreUnavailableError:
                        # A restart or a failover: the wait outlives it (to its deadline).
                        await anyio.sleep(poll_seconds)
                        continue
                    last[:] = [status]
                    if status.is_terminal:
                        return status
                    await anyio.sleep(poll_seconds)
        except TimeoutError:
            state = f"it was last seen {last[0].value}" if last else "its status never came back"
            if last and last[0] is WorkflowStatus.PENDING:
                hint = await why_pending(self.store, self.id)
                state += f": {hint}" if hint else ""
            raise WaitTimeoutError(
                f"Timed out after {deadline_seconds}s waiting for workflow {self.id}; {state}. "
                "The workflow was not cancelled: check handle.status() later."
            ) from None

    def _in_body(self) -> bool:
        ctx = body_context()
        return ctx is not None and ctx.store is self.store

    async def _settled(self, timeout: float | None) -> _Outcome | None:
        """From a workflow body: wait durably until this workflow settles, once per call
        site; ``None`` after ``timeout`` seconds."""
        ctx = body_context()
        assert ctx is not None

        async def look() -> str | None:
            record = await self.info()
            if not record.status.is_terminal:
                if record.parent_id != ctx.workflow_id:
                    raise InvalidStateError(
                        f"workflow {ctx.workflow_id} cannot wait in its body for workflow "
                        f"{self.id}, which is not its child (only a child's end wakes its "
                        "parent): start it from the body, or poll it from a step"
                    )
                return None
            return json.dumps([record.status.value, record.output, record.error])

        until = None if timeout is None else timedelta(seconds=timeout)
        found = json.loads(await ctx.run.join(self.id, until, look))
        return None if found is None else _Outcome(WorkflowStatus(found[0]), found[1], found[2])

    async def output_raw(self) -> str:
        """The output JSON text of a succeeded workflow.

        In a workflow body, waits durably for the workflow to settle first.
        """
        record: WorkflowRecord | _Outcome
        if self._in_body():
            outcome = await self._settled(None)
            assert outcome is not None
            record = outcome
        else:
            record = await self.info()
        if record.status is WorkflowStatus.SUCCEEDED and record.output is not None:
            return record.output
        if record.status in (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED):
            raise recorded_exception(self.id, record.status, load_error(record.error))
        raise WorkflowNotFinishedError(
            f"workflow {self.id} is {record.status.value}; it has no output yet (use wait())"
        )

    @overload
    async def output(self) -> R: ...

    @overload
    async def output(self, type_: type[T]) -> T: ...

    async def output(self, type_: type[Any] | None = None) -> Any:
        """The decoded output, optionally converted to ``type_``.

        Raises :class:`WorkflowFailedError` if the workflow failed (also of the recorded
        error's own type when that is importable here), :class:`WorkflowCancelledError`
        (:class:`WorkflowTimeoutError`) if it was cancelled (timed out), and
        :class:`WorkflowNotFinishedError` if it has not finished; see
        :func:`~durable_core.codec.failures.recorded_exception`.
        """
        value = decode(await self.output_raw(), what=f"output of workflow {self.id}")
        if type_ is None:
            return cast(R, value)
        return convert(value, type_)

    async def cancel(self) -> None:
        """Cancel the workflow and its unfinished children. A running body stops at once
        (on PostgreSQL; elsewhere at its next write), its interrupted step ends
        ``cancelled``; a waiting or pending one simply never runs again. A workflow that
        owes a saga's compensations runs them first, then ends cancelled
        (:func:`~durable_core.saga`)."""

        async def cancel() -> str:
            await admin_of(self.store, "cancel()").cancel_workflow(self.id)
            return "null"

        await body_effect("durable.cancel", [self.id], cancel)

    async def get_event(self, key: str, timeout: float | timedelta | None = None) -> Any:
        """The value the workflow published under ``key`` with ``set_event``, waiting up to
        ``timeout`` for it to appear; ``None`` if it has not by then."""
        timeout_seconds = _seconds(timeout, "get_event timeout")
        deadline = None if timeout_seconds is None else anyio.current_time() + timeout_seconds
        while True:
            # Each look runs to its end (a cancelled query could break the connection).
            text = await self.store.get_event(self.id, key)
            if text is not None:
                return decode(text, what=f"event {key!r} of workflow {self.id}")
            if deadline is not None and anyio.current_time() >= deadline:
                return None
            pause = EVENT_POLL_SECONDS
            if deadline is not None:
                pause = min(pause, deadline - anyio.current_time())
            await anyio.sleep(max(pause, 0.0))

    def read_stream(self, key: str, *, offset: int = 0) -> AsyncIterator[Any]:
        """The values the workflow writes to its stream ``key`` (``write_stream``), in order
        from ``offset``, as they come: ``async for value in handle.read_stream(key)``. It
        ends after the body closes the key (``close_stream``) or once the workflow ends."""
        return read_stream(self.store, self.id, key, offset)

    async def error(self) -> dict[str, Any] | None:
        """The recorded error (type, message, traceback, step) of the last failed attempt."""
        return load_error((await self.info()).error)
