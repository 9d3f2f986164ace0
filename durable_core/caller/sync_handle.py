"""``SyncHandle``: the blocking twin of a workflow handle, made by a
:class:`~durable_core.caller.sync.SyncClient`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar, overload

from ..seams.attributes import AttributeValue
from ..seams.records import (
    AttemptRecord,
    StepRecord,
    StepTryRecord,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.store import Store
from .handle import WorkflowHandle

R = TypeVar("R")
T = TypeVar("T")


class _Blocking(Protocol):
    """What a handle uses of the :class:`~durable_core.caller.sync.SyncClient` that made it."""

    @property
    def store(self) -> Store: ...

    def call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T: ...


class SyncHandle(Generic[R]):
    """The blocking twin of :class:`~durable_core.caller.handle.WorkflowHandle`."""

    def __init__(self, client: _Blocking, handle: WorkflowHandle[R]) -> None:
        self._client = client
        self.id = handle.id
        """The workflow id."""
        self.name = handle.name
        """The workflow's name, when the handle was made by starting it."""

    def __repr__(self) -> str:
        return f"SyncHandle({self.id!r})"

    def _call(self, method: str, *args: Any) -> Any:
        def run() -> Awaitable[Any]:
            handle: WorkflowHandle[R] = WorkflowHandle(self._client.store, self.id, self.name)
            return getattr(handle, method)(*args)  # type: ignore[no-any-return]

        run.__name__ = method
        return self._client.call(run)

    def status(self) -> WorkflowStatus:
        """The live status."""
        return self._call("status")  # type: ignore[no-any-return]

    def info(self) -> WorkflowRecord:
        """The whole row."""
        return self._call("info")  # type: ignore[no-any-return]

    def steps(self) -> list[StepRecord]:
        """The recorded steps, in index order."""
        return self._call("steps")  # type: ignore[no-any-return]

    def step_tries(self) -> list[StepTryRecord]:
        """Every failed try of its steps, oldest first."""
        return self._call("step_tries")  # type: ignore[no-any-return]

    def attempts(self) -> list[AttemptRecord]:
        """Every ended attempt, oldest first."""
        return self._call("attempts")  # type: ignore[no-any-return]

    def wait(self, timeout: float | timedelta | None = None) -> WorkflowStatus:
        """Block until the workflow ends and return its terminal status; with a ``timeout``,
        raise :class:`~durable_core.errors.WaitTimeoutError` when it passes first (the
        workflow is not cancelled)."""
        if timeout is None:
            return self._call("wait")  # type: ignore[no-any-return]
        return self._call("wait_with_timeout", timeout)  # type: ignore[no-any-return]

    def wait_with_timeout(self, timeout: float | timedelta) -> WorkflowStatus:
        """Block at most ``timeout`` for a terminal status (as ``wait(timeout)``)."""
        return self._call("wait_with_timeout", timeout)  # type: ignore[no-any-return]

    def wait_with_options(
        self, poll: float | timedelta | None = None, deadline: float | timedelta | None = None
    ) -> WorkflowStatus:
        """Wait for a terminal status, polling every ``poll`` for at most ``deadline``."""
        return self._call("wait_with_options", poll, deadline)  # type: ignore[no-any-return]

    @overload
    def output(self) -> R: ...

    @overload
    def output(self, type_: type[T]) -> T: ...

    def output(self, type_: type[Any] | None = None) -> Any:
        """The decoded output (converted to ``type_`` if given); see
        :meth:`WorkflowHandle.output <durable_core.caller.handle.WorkflowHandle.output>`."""
        return self._call("output") if type_ is None else self._call("output", type_)

    def output_raw(self) -> str:
        """The output JSON text of a succeeded workflow."""
        return self._call("output_raw")  # type: ignore[no-any-return]

    def error(self) -> dict[str, Any] | None:
        """The recorded error, if any."""
        return self._call("error")  # type: ignore[no-any-return]

    def cancel(self) -> None:
        """Cancel the workflow and its unfinished children."""
        self._call("cancel")

    def set_attributes(
        self, values: Mapping[str, AttributeValue | None] | None = None, /, **more: Any
    ) -> None:
        """Set the workflow's searchable attributes (``None`` removes a name)."""
        self._call("set_attributes", {**(values or {}), **more})

    def attributes(self) -> dict[str, AttributeValue]:
        """The workflow's searchable attributes, by name."""
        return self._call("attributes")  # type: ignore[no-any-return]

    def get_event(self, key: str, timeout: float | timedelta | None = None) -> Any:
        """The value the workflow published under ``key``, waiting up to ``timeout`` for it
        (``None`` then); with no timeout, until it appears."""
        return self._call("get_event", key, timeout)

    def read_stream(self, key: str, *, offset: int = 0) -> Iterator[Any]:
        """The values of the workflow's stream ``key`` from ``offset``, each as it comes,
        until the key is closed or the workflow ends (blocking between values)."""
        handle: WorkflowHandle[R] = WorkflowHandle(self._client.store, self.id, self.name)
        values = handle.read_stream(key, offset=offset)
        try:
            while True:
                try:
                    yield self._client.call(values.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            self._client.call(values.aclose)  # type: ignore[attr-defined]
