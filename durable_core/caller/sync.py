"""Blocking access for synchronous code (Django, Flask, scripts): :class:`SyncClient`.

A ``SyncClient`` runs an event loop in a background thread (anyio's blocking
portal) with one open store on it, and every method hands its call to that
loop and blocks until it is done. Any number of threads may call one client
at once; their calls run concurrently on the loop. Open one per process, at
start-up, and close it at exit (or use it as a context manager)::

    durable = SyncClient("postgresql://app@db/app")
    handle = durable.start_workflow(welcome_flow, user_id)
    handle.wait(timeout=30)

It survives a fork (gunicorn ``--preload``, ``multiprocessing`` with the
``fork`` start method): the child's first call opens a loop and a store of its
own, leaving the parent's connections untouched. It refuses to be called where
an event loop runs (inside ``async def`` code, a workflow or a step), which it
would stall: ``await`` the async API there.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

from ..definitions.debounce import DebounceKey
from ..definitions.queues import Queue
from ..definitions.retention import SETTLED
from ..seams.attributes import AttributeFilter, AttributeValue
from ..seams.records import (
    BacklogRecord,
    EndedAttempts,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.store import Store
from .client import DurableClient, WorkflowStart
from .handle import WorkflowHandle
from .sync_handle import SyncHandle as SyncHandle
from .sync_loop import _Shared
from .sync_loop import refuse_in_event_loop as refuse_in_event_loop
from .sync_oncall import SyncOnCallMethods
from .sync_schedules import SyncScheduleMethods

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _on(store: Store, template: DurableClient) -> DurableClient:
    """A client like ``template`` (its options) on ``store``."""
    return DurableClient(
        store,
        max_attempts=template.max_attempts,
        timeout=template.timeout,
        queue=template.queue,
        priority=template.priority,
        concurrency_key=template.concurrency_key,
        attributes=template.attributes,
    )


class SyncClient(SyncOnCallMethods, SyncScheduleMethods):
    """A blocking :class:`~durable_core.caller.client.DurableClient` on the store for ``url``
    (default: ``DURABLE_DATABASE_URL``), safe to share between threads and across a fork.

    It opens on construction and stays open until :meth:`close` (or the end of a
    ``with`` block). Its copies made by :meth:`with_options` share its loop and
    store: closing one closes them all.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
    ) -> None:
        self._shared = _Shared(url)
        try:
            self._template = DurableClient(
                self._shared.current.store, max_attempts=max_attempts, timeout=timeout
            )
        except BaseException:
            self._shared.close()
            raise
        self._bound = self._template

    @property
    def store(self) -> Store:
        """The open store, on the client's loop (in this process)."""
        return self._shared.loop().store

    @property
    def client(self) -> DurableClient:
        """The async client the methods run on the loop, with this client's options."""
        store = self.store
        if self._bound.store is not store:
            self._bound = _on(store, self._template)
        return self._bound

    def with_options(
        self,
        *,
        timeout: float | timedelta | None = None,
        max_attempts: int | None = None,
        queue: Queue | str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> SyncClient:
        """This client (on the same loop and store), starting workflows with these options;
        see :meth:`DurableClient.with_options`."""
        copy = object.__new__(SyncClient)
        copy._shared = self._shared
        copy._template = self._template.with_options(
            timeout=timeout,
            max_attempts=max_attempts,
            queue=queue,
            priority=priority,
            concurrency_key=concurrency_key,
            attributes=attributes,
        )
        copy._bound = copy._template
        return copy

    def call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``await func(*args, **kwargs)`` on the client's loop and return its result
        (for the async API this class does not wrap, e.g. a test's ``WorkflowRunner``).

        Raises :class:`~durable_core.errors.BlockingCallInEventLoopError` where an event loop
        runs, and :class:`~durable_core.errors.ConfigurationError` once closed."""
        refuse_in_event_loop(getattr(func, "__name__", "call"))
        return self._shared.loop().portal.call(functools.partial(func, *args, **kwargs))

    def close(self) -> None:
        """Close the store and stop the background loop (a second call does nothing). In a
        forked child that never used it, the parent's loop and store are left alone."""
        refuse_in_event_loop("close")
        self._shared.close()

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
        self,
        delay_seconds: float | timedelta,
        fn: Callable[P, Awaitable[R]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> SyncHandle[R]:
        """Like :meth:`start_workflow`, due ``delay_seconds`` (or a timedelta) from now."""
        started = self.call(self.client.start_workflow_later, delay_seconds, fn, *args, **kwargs)
        return self._wrap(started)

    def start_workflow_debounced(
        self,
        debounce: DebounceKey,
        fn: Callable[P, Awaitable[R]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> SyncHandle[R]:
        """Like :meth:`DurableClient.start_workflow_debounced`: the starts of ``fn`` under
        ``debounce.key`` collapse into one run, with the last arguments."""
        started = self.call(self.client.start_workflow_debounced, debounce, fn, *args, **kwargs)
        return self._wrap(started)

    def start_workflows(
        self,
        fn: Callable[..., Awaitable[R]],
        arguments: Iterable[Sequence[Any] | Mapping[str, Any] | WorkflowStart],
    ) -> list[SyncHandle[R]]:
        """Enqueue many instances in one statement; all are written, or none."""
        items = list(arguments)
        return [self._wrap(h) for h in self.call(self.client.start_workflows, fn, items)]

    def erase(self, workflow_id: str) -> int:
        """Erase a settled workflow's payloads (see :meth:`DurableClient.erase`)."""
        result: int = self.call(self.client.erase, workflow_id)
        return result

    def prune(
        self,
        older_than: float | timedelta | str,
        *,
        statuses: Iterable[WorkflowStatus | str] = SETTLED,
        names: Iterable[str] = (),
        queues: Iterable[str] = (),
        dry_run: bool = False,
        batch: int = 1000,
    ) -> dict[str, int]:
        """Remove settled workflows older than ``older_than`` (see :meth:`DurableClient.prune`)."""
        result: dict[str, int] = self.call(
            self.client.prune,
            older_than,
            statuses=statuses,
            names=names,
            queues=queues,
            dry_run=dry_run,
            batch=batch,
        )
        return result

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

    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        timeout: float | timedelta | None = None,
        update_id: str | None = None,
    ) -> Any:
        """Send an update and return the body's reply (see :meth:`DurableClient.update`)."""
        return self.call(
            self.client.update, workflow_id, name, payload, timeout=timeout, update_id=update_id
        )

    def handle(self, workflow_id: str) -> SyncHandle[Any]:
        """A handle to an existing workflow."""
        return self._wrap(WorkflowHandle(self.store, workflow_id))

    # -- administration ---------------------------------------------------------------------

    def list_workflows(
        self,
        *,
        status: WorkflowStatus | str | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: Queue | str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
        attributes: Mapping[str, AttributeFilter] | None = None,
    ) -> list[WorkflowRecord]:
        """The newest workflows first, optionally filtered, a page at a time; see
        :meth:`DurableClient.list_workflows`."""
        return self.call(
            self.client.list_workflows,
            status=status,
            name=name,
            limit=limit,
            queue=queue,
            parent_id=parent_id,
            created_after=created_after,
            created_before=created_before,
            before=before,
            error_type=error_type,
            attributes=attributes,
        )

    def set_attributes(
        self,
        workflow_id: str,
        values: Mapping[str, AttributeValue | None] | None = None,
        /,
        **more: AttributeValue | None,
    ) -> None:
        """Set workflow ``workflow_id``'s searchable attributes (``None`` removes a name)."""
        self.handle(workflow_id).set_attributes(values, **more)

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

    def backlog(self) -> list[BacklogRecord]:
        """The unfinished workflows counted by queue, name and status."""
        return self.call(self.client.backlog)

    @property
    def has_stats(self) -> bool:
        """Whether the store counts ended attempts (:meth:`count_ended_attempts`)."""
        return self.client.has_stats

    def count_ended_attempts(self, after: int | None = None) -> EndedAttempts:
        """The attempts that ended since the cursor ``after``, by queue and outcome."""
        return self.call(self.client.count_ended_attempts, after)
