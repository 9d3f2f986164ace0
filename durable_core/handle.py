"""``WorkflowHandle``: poll, wait on and read the result of one workflow instance."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast, overload

import anyio

from .errors import (
    ConfigurationError,
    WaitTimeoutError,
    WorkflowFailedError,
    WorkflowNotFinishedError,
    WorkflowNotFoundError,
)
from .failures import load_error
from .records import StepRecord, WorkflowRecord, WorkflowStatus
from .serialization import convert, decode
from .store import Store

R = TypeVar("R")
T = TypeVar("T")

DEFAULT_POLL_SECONDS = 0.1


def _seconds(value: float | timedelta | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if math.isnan(seconds) or seconds < 0:
        raise ConfigurationError(f"{what} must be a non-negative duration, got {value!r}")
    return seconds


class WorkflowHandle(Generic[R]):
    """Refers to one enqueued workflow instance by id."""

    def __init__(self, store: Store, workflow_id: str, name: str | None = None) -> None:
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
                f"no workflow with id {self.id!r} in {self.store.description}"
            )
        return record

    async def status(self) -> WorkflowStatus:
        """The live status of the workflow."""
        return (await self.info()).status

    async def steps(self) -> list[StepRecord]:
        """The recorded steps, in index order."""
        return await self.store.load_steps(self.id)

    async def wait(self) -> WorkflowStatus:
        """Wait, however long it takes, for a terminal status. Prefer :meth:`wait_with_timeout`."""
        return await self.wait_with_options()

    async def wait_with_timeout(self, timeout: float | timedelta) -> WorkflowStatus:
        """Wait at most ``timeout`` for a terminal status.

        Raises :class:`WaitTimeoutError` (also a ``TimeoutError``) on time, even if a
        status query is stalled. The workflow is not cancelled.
        """
        return await self.wait_with_options(deadline=timeout)

    async def wait_with_options(
        self,
        poll: float | timedelta | None = None,
        deadline: float | timedelta | None = None,
    ) -> WorkflowStatus:
        """Wait for a terminal status, polling every ``poll`` for at most ``deadline``."""
        poll_seconds = _seconds(poll, "poll") or DEFAULT_POLL_SECONDS
        deadline_seconds = _seconds(deadline, "deadline")
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
                    status = await self.status()
                    last[:] = [status]
                    if status.is_terminal:
                        return status
                    await anyio.sleep(poll_seconds)
        except TimeoutError:
            state = f"it was last seen {last[0].value}" if last else "its status never came back"
            raise WaitTimeoutError(
                f"Timed out after {deadline_seconds}s waiting for workflow {self.id}; {state}. "
                "The workflow was not cancelled: check handle.status() later."
            ) from None

    async def output_raw(self) -> str:
        """The output JSON text of a succeeded workflow."""
        record = await self.info()
        if record.status is WorkflowStatus.SUCCEEDED and record.output is not None:
            return record.output
        error = load_error(record.error)
        if record.status in (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED):
            message = (error or {}).get("message", "no error recorded")
            raise WorkflowFailedError(f"workflow {self.id} {record.status.value}: {message}", error)
        raise WorkflowNotFinishedError(
            f"workflow {self.id} is {record.status.value}; it has no output yet (use wait())"
        )

    @overload
    async def output(self) -> R: ...

    @overload
    async def output(self, type_: type[T]) -> T: ...

    async def output(self, type_: type[Any] | None = None) -> Any:
        """The decoded output, optionally converted to ``type_``.

        Raises :class:`WorkflowFailedError` if the workflow failed and
        :class:`WorkflowNotFinishedError` if it has not finished.
        """
        value = decode(await self.output_raw(), what=f"output of workflow {self.id}")
        if type_ is None:
            return cast(R, value)
        return convert(value, type_)

    async def error(self) -> dict[str, Any] | None:
        """The recorded error (type, message, traceback, step) of the last failed attempt."""
        return load_error((await self.info()).error)
