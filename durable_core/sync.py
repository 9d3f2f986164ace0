"""Blocking access for synchronous code (Django, Flask, scripts): :class:`SyncClient`.

A ``SyncClient`` runs an event loop in a background thread (anyio's blocking
portal) with one open store on it, and every method hands its call to that
loop and blocks until it is done. Any number of threads may call one client
at once; their calls run concurrently on the loop. Open one per process, at
start-up, and close it at exit (or use it as a context manager)::

    durable = SyncClient("postgresql://app@db/app")
    handle = durable.start_workflow(welcome_flow, user_id)
    handle.wait(timeout=30)

Do not call it from inside a workflow or from the loop of an ``async`` function:
``await`` the async API there.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, ParamSpec, Self, TypeVar, overload

from anyio.from_thread import BlockingPortal, start_blocking_portal

from .backends import open_store
from .client import DurableClient, WorkflowStart
from .errors import ConfigurationError
from .handle import WorkflowHandle
from .records import AttemptRecord, StepRecord, WorkflowRecord, WorkflowStatus
from .store import Store

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class SyncHandle(Generic[R]):
    """The blocking twin of :class:`~durable_core.handle.WorkflowHandle`."""

    def __init__(self, client: SyncClient, handle: WorkflowHandle[R]) -> None:
        self._client = client
        self._handle = handle

    @property
    def id(self) -> str:
        """The workflow id."""
        return self._handle.id

    def __repr__(self) -> str:
        return f"SyncHandle({self._handle.id!r})"

    def status(self) -> WorkflowStatus:
        """The live status."""
        return self._client.call(self._handle.status)

    def info(self) -> WorkflowRecord:
        """The whole row."""
        return self._client.call(self._handle.info)

    def steps(self) -> list[StepRecord]:
        """The recorded steps, in index order."""
        return self._client.call(self._handle.steps)

    def attempts(self) -> list[AttemptRecord]:
        """Every ended attempt, oldest first."""
        return self._client.call(self._handle.attempts)

    def wait(self, timeout: float | timedelta | None = None) -> WorkflowStatus:
        """Block until the workflow ends and return its terminal status; with a ``timeout``,
        raise :class:`~durable_core.errors.WaitTimeoutError` when it passes first (the
        workflow is not cancelled)."""
        if timeout is None:
            return self._client.call(self._handle.wait)
        return self._client.call(self._handle.wait_with_timeout, timeout)

    @overload
    def output(self) -> R: ...

    @overload
    def output(self, type_: type[T]) -> T: ...

    def output(self, type_: type[Any] | None = None) -> Any:
        """The decoded output (converted to ``type_`` if given); see
        :meth:`WorkflowHandle.output <durable_core.handle.WorkflowHandle.output>`."""
        if type_ is None:
            return self._client.call(self._handle.output)
        return self._client.call(self._handle.output, type_)

    def error(self) -> dict[str, Any] | None:
        """The recorded error, if any."""
        return self._client.call(self._handle.error)

    def cancel(self) -> None:
        """Cancel the workflow and its unfinished children."""
        self._client.call(self._handle.cancel)

    def get_event(self, key: str, timeout: float | timedelta | None = None) -> Any:
        """The value the workflow published under ``key``, waiting up to ``timeout`` for it
        (``None`` then); with no timeout, until it appears."""
        return self._client.call(self._handle.get_event, key, timeout)


class SyncClient:
    """A blocking :class:`~durable_core.client.DurableClient` on the store for ``url``
    (default: ``DURABLE_DATABASE_URL``), safe to share between threads.

    It opens on construction and stays open until :meth:`close` (or the end of a
    ``with`` block).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal("asyncio")
        self._portal: BlockingPortal | None = self._portal_cm.__enter__()
        try:
            self.store: Store = self._portal.call(open_store, url)
            self.client = DurableClient(self.store, max_attempts=max_attempts, timeout=timeout)
        except BaseException as exc:
            self._portal = None
            self._portal_cm.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``await func(*args, **kwargs)`` on the client's loop and return its result
        (for the async API this class does not wrap, e.g. a test's ``WorkflowRunner``)."""
        portal = self._portal
        if portal is None:
            raise ConfigurationError("this SyncClient is closed")
        return portal.call(functools.partial(func, *args, **kwargs))

    def close(self) -> None:
        """Close the store and stop the background loop (a second call does nothing)."""
        with self._lock:
            portal, self._portal = self._portal, None
            if portal is None:
                return
            try:
                portal.call(self.store.close)
            finally:
                self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _wrap(self, handle: WorkflowHandle[R]) -> SyncHandle[R]:
        return SyncHandle(self, handle)

    # -- starting ---------------------------------------------------------------------------

    def apply_schema(self) -> None:
        """Create or upgrade the durable tables (as ``durable migrate`` does)."""
        self.call(self.store.apply_schema)

    def start_workflow(
        self, fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> SyncHandle[R]:
        """Enqueue ``fn(*args, **kwargs)``; see :meth:`DurableClient.start_workflow`."""
        return self._wrap(self.call(self.client.start_workflow, fn, *args, **kwargs))

    def start_workflow_with_id(
        self, workflow_id: str, fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> SyncHandle[R]:
        """Start ``fn(*args, **kwargs)`` as ``workflow_id``, at most once."""
        started = self.call(self.client.start_workflow_with_id, workflow_id, fn, *args, **kwargs)
        return self._wrap(started)

    def start_workflow_later(
        self, delay_seconds: float, fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> SyncHandle[R]:
        """Like :meth:`start_workflow`, due ``delay_seconds`` from now."""
        started = self.call(self.client.start_workflow_later, delay_seconds, fn, *args, **kwargs)
        return self._wrap(started)

    def start_workflows(
        self,
        fn: Callable[..., Awaitable[R]],
        arguments: Iterable[Sequence[Any] | Mapping[str, Any] | WorkflowStart],
    ) -> list[SyncHandle[R]]:
        """Enqueue many instances in one statement; all are written, or none."""
        items = list(arguments)
        return [self._wrap(h) for h in self.call(self.client.start_workflows, fn, items)]

    def send(
        self,
        workflow_id: str,
        message: Any,
        *,
        topic: str = "",
        idempotency_key: str | None = None,
    ) -> None:
        """Send ``message`` to workflow ``workflow_id`` (see :meth:`DurableClient.send`)."""
        self.call(
            self.client.send, workflow_id, message, topic=topic, idempotency_key=idempotency_key
        )

    def handle(self, workflow_id: str) -> SyncHandle[Any]:
        """A handle to an existing workflow."""
        return self._wrap(self.client.handle(workflow_id))

    # -- administration ---------------------------------------------------------------------

    def list_workflows(
        self,
        *,
        status: WorkflowStatus | str | None = None,
        name: str | None = None,
        limit: int = 50,
    ) -> list[WorkflowRecord]:
        """The newest workflows first, optionally filtered."""
        return self.call(self.client.list_workflows, status=status, name=name, limit=limit)

    def get(self, workflow_id: str) -> WorkflowRecord:
        """The row of workflow ``workflow_id``."""
        return self.call(self.client.get, workflow_id)

    def retry(self, workflow_id: str) -> None:
        """Put a failed or cancelled workflow back to pending."""
        self.call(self.client.retry, workflow_id)

    def cancel(self, workflow_id: str) -> None:
        """Cancel a workflow and its unfinished children."""
        self.call(self.client.cancel, workflow_id)

    def fork(self, workflow_id: str, *, from_step: int) -> SyncHandle[Any]:
        """A new workflow that reruns ``workflow_id`` from step ``from_step``."""
        return self._wrap(self.call(self.client.fork, workflow_id, from_step=from_step))
