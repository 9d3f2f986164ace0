"""Starting workflows: ``start_workflow`` and the store it writes to.

A store is bound in one of three ways, looked up in this order:

1. an explicit :class:`DurableClient` (``await client.start_workflow(...)``);
2. inside a running workflow or step, the store the worker runs it on;
3. the ambient default set by :func:`use_store` (per task, via contextvars)
   or :func:`set_default_store` (process-wide).
"""

from __future__ import annotations

import functools
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from .. import durations
from ..codec import encode, encode_arguments
from ..definitions.debounce import DebounceKey
from ..definitions.queues import MAX_QUEUE_NAME, Queue, queue_name
from ..definitions.registry import Workflow, as_workflow
from ..errors import (
    ConfigurationError,
    InvalidArgumentsError,
)
from ..primitives.updates import update
from ..runtime.config import default_max_attempts
from ..runtime.context import WorkflowContext, body_context, body_effect
from ..runtime.effects import Enqueue
from ..seams.attributes import (
    AttributeValue,
    attributes_of,
    check_attributes,
)
from ..seams.flow_roles import debouncer_of
from ..seams.plugins import message_sent, observers, workflow_headers
from ..seams.records import NewWorkflow, check_topic
from ..seams.roles import CallerStore
from .admin import AdminMethods
from .handle import WorkflowHandle
from .ids import MAX_ID_LENGTH as MAX_ID_LENGTH
from .ids import check_workflow_id
from .ids import new_workflow_id as new_workflow_id
from .oncall import OnCallMethods
from .schedule_admin import ScheduleMethods

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class WorkflowStart:
    """One item of :meth:`DurableClient.start_workflows` that names its workflow id."""

    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    workflow_id: str | None = None


_ambient: ContextVar[CallerStore | None] = ContextVar("durable_ambient_store", default=None)
_default: list[CallerStore] = []


def set_default_store(store: CallerStore | None) -> None:
    """Bind ``store`` as the process-wide default (``None`` unbinds it)."""
    _default[:] = [] if store is None else [store]


@contextmanager
def use_store(store: CallerStore) -> Iterator[CallerStore]:
    """Bind ``store`` as the default for the current task and the tasks it starts."""
    token = _ambient.set(store)
    try:
        yield store
    finally:
        _ambient.reset(token)


def current_store() -> CallerStore:
    """The store ``start_workflow`` writes to here (see the module docs for the order)."""
    ctx = WorkflowContext.current()
    if ctx is not None:
        return ctx.store
    store = _ambient.get()
    if store is not None:
        return store
    if _default:
        return _default[0]
    raise ConfigurationError(
        "no store is bound: use DurableClient(store), `with use_store(store):`, or "
        "set_default_store(store) (open one with `await open_store(url)`)"
    )


@functools.lru_cache(maxsize=1024)
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``inspect.signature(fn)``, computed once per function (it costs ~6 us a call)."""
    return inspect.signature(fn)


def _with_headers(row: NewWorkflow) -> NewWorkflow:
    """``row`` with the headers observers add to it (a trace context); its own win."""
    added = workflow_headers(row.id, row.name)
    return replace(row, headers={**added, **(row.headers or {})}) if added else row


class DurableClient(AdminMethods, ScheduleMethods, OnCallMethods):
    """Starts workflows on one store and hands out handles to them; adds, lists, pauses,
    resumes, triggers and deletes schedules
    (:class:`~durable_core.caller.schedule_admin.ScheduleMethods`);
    counts, groups, retries and cancels many workflows at once and lists the live workers
    (:class:`~durable_core.caller.oncall.OnCallMethods`); lists, reads, retries and
    forks workflows (:class:`~durable_core.caller.admin.AdminMethods`)."""

    def __init__(
        self,
        store: CallerStore,
        *,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        queue: Queue | str | None = None,
        priority: int = 0,
        concurrency_key: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> None:
        if max_attempts is not None and max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be at least 1, got {max_attempts}")
        self.timeout = (
            None
            if timeout is None
            else durations.seconds(timeout, "DurableClient timeout", allow_zero=False)
        )
        if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) >= 2**31:
            raise ConfigurationError(f"priority must be a whole number (32 bits), got {priority!r}")
        if concurrency_key is not None and not (
            isinstance(concurrency_key, str) and 0 < len(concurrency_key) <= MAX_QUEUE_NAME
        ):
            raise ConfigurationError(
                f"a concurrency key is a string of 1 to {MAX_QUEUE_NAME} characters, "
                f"got {concurrency_key!r}"
            )
        self.store = store
        self.max_attempts = max_attempts
        self.queue = None if queue is None else queue_name(queue)
        """The queue its starts go to; ``None``: each workflow's own (``@workflow(queue=)``)."""
        self.priority = priority
        self.concurrency_key = concurrency_key
        self.attributes: dict[str, AttributeValue] | None = None
        """The searchable attributes its starts write with each workflow."""
        if attributes:
            attributes_of(store)
            checked = check_attributes(attributes)
            if any(value is None for value in checked.values()):
                raise ConfigurationError("a start's attributes are values, not None")
            self.attributes = {k: v for k, v in checked.items() if v is not None}

    def with_options(
        self,
        *,
        timeout: float | timedelta | None = None,
        max_attempts: int | None = None,
        queue: Queue | str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> DurableClient:
        """This client, starting workflows with a ``timeout`` (each is cancelled, wherever it
        is, that long after it starts: ``WorkflowTimeoutError`` is its recorded error), an
        attempt budget ``max_attempts``, in ``queue`` (instead of the workflow's own), with
        ``priority`` (higher is claimed first within the queue), ``concurrency_key``
        (what the queue's ``key_concurrency`` and
        ``key_rate_limit`` count by) and searchable ``attributes``
        (written with each workflow, added to this client's)."""
        if timeout is not None:
            timeout = durations.seconds(timeout, "with_options timeout", allow_zero=False)
        return DurableClient(
            self.store,
            max_attempts=max_attempts or self.max_attempts,
            timeout=timeout if timeout is not None else self.timeout,
            queue=queue if queue is not None else self.queue,
            priority=priority if priority is not None else self.priority,
            concurrency_key=concurrency_key
            if concurrency_key is not None
            else self.concurrency_key,
            attributes={**(self.attributes or {}), **(attributes or {})} or None,
        )

    def _prepare(
        self,
        definition: Workflow[Any, Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        delay_seconds: float,
        workflow_id: str | None = None,
    ) -> NewWorkflow:
        try:
            _signature(definition.fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentsError(
                f"arguments do not fit workflow {definition.name}: {exc}"
            ) from None
        if workflow_id is not None:
            check_workflow_id(workflow_id)
        payload = encode_arguments(
            tuple(args), dict(kwargs), what=f"arguments of workflow {definition.name}"
        )
        return NewWorkflow(
            id=workflow_id or new_workflow_id(),
            name=definition.name,
            input=payload,
            max_attempts=definition.max_attempts or self.max_attempts or default_max_attempts(),
            delay_seconds=delay_seconds,
            timeout_seconds=self.timeout if self.timeout is not None else definition.timeout,
            queue=self.queue or definition.queue,
            priority=self.priority,
            concurrency_key=self.concurrency_key,
            attributes=self.attributes,
        )

    async def _enqueue(
        self, rows: list[NewWorkflow], chosen: Sequence[bool]
    ) -> list[WorkflowHandle[Any]]:
        """Write ``rows``; ``chosen[i]`` says whether the caller named row ``i``'s id. From a
        workflow body, through its attempt: once per call site, after the steps before it
        have committed, and on the same store as children of the workflow."""
        ctx = body_context()
        if ctx is not None:
            ids = await ctx.run.start(rows, chosen, self._write, children=ctx.store is self.store)
            rows = [replace(row, id=child_id) for row, child_id in zip(rows, ids, strict=True)]
        else:
            await self._write(rows)
        return [WorkflowHandle(self.store, row.id, row.name) for row in rows]

    async def _write(self, rows: list[NewWorkflow], enqueue: Enqueue | None = None) -> None:
        """Write ``rows`` through ``enqueue`` (a body's: fenced), else this store's."""
        rows = [_with_headers(row) for row in rows]
        written = set(await (enqueue or self.store.enqueue)(rows))
        for row in rows:
            if row.id in written:
                observers().durable_workflow_enqueued(
                    workflow_id=row.id,
                    workflow_name=row.name,
                    max_attempts=row.max_attempts,
                )

    async def start_workflow(
        self, fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> WorkflowHandle[R]:
        """Enqueue ``fn(*args, **kwargs)``. Nothing is written if the arguments cannot
        be serialized or do not fit the signature."""
        definition = as_workflow(fn)
        return (await self._enqueue([self._prepare(definition, args, kwargs, 0.0)], [False]))[0]

    async def start_workflow_with_id(
        self, workflow_id: str, fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> WorkflowHandle[R]:
        """Start ``fn(*args, **kwargs)`` as ``workflow_id``, at most once: when that id exists
        with the same workflow and arguments, nothing is written and the handle refers
        to it, whatever its state. Another workflow or other arguments under the id
        raise :class:`~durable_core.errors.WorkflowConflictError`."""
        definition = as_workflow(fn)
        row = self._prepare(definition, args, kwargs, 0.0, workflow_id)
        return (await self._enqueue([row], [True]))[0]

    async def start_workflow_later(
        self,
        delay_seconds: float | timedelta,
        fn: Callable[P, Awaitable[R]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> WorkflowHandle[R]:
        """Like :meth:`start_workflow`, due ``delay_seconds`` (or a timedelta) from now, at
        most :data:`~durable_core.durations.MAX_DURATION`."""
        definition = as_workflow(fn)
        delay = durations.seconds(delay_seconds, "start_workflow_later delay_seconds")
        row = self._prepare(definition, args, kwargs, delay)
        return (await self._enqueue([row], [False]))[0]

    async def start_workflow_debounced(
        self,
        debounce: DebounceKey,
        fn: Callable[P, Awaitable[R]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> WorkflowHandle[R]:
        """Start ``fn(*args, **kwargs)`` ``debounce.seconds`` from now, collapsed with the other
        starts of ``fn`` under ``debounce.key``: while the key's run has not started, a
        start gives it these arguments and pushes it back ``debounce.seconds`` (never past
        ``debounce.max_wait`` after the window's first start). Every caller, in any
        process, gets a handle to the one run; a start after it began opens a new
        window. Needs a :class:`~durable_core.seams.store.Debouncer` store (every SQL
        store is one)."""
        if not isinstance(debounce, DebounceKey):
            raise ConfigurationError(f"debounce must be a DebounceKey, got {debounce!r}")
        definition = as_workflow(fn)
        row = _with_headers(self._prepare(definition, args, kwargs, 0.0))
        store = debouncer_of(self.store)

        async def start() -> str:
            run, written = await store.debounce(
                row, debounce.key, debounce.window_seconds, debounce.max_wait_seconds
            )
            if written:
                observers().durable_workflow_enqueued(
                    workflow_id=run, workflow_name=row.name, max_attempts=row.max_attempts
                )
            return json.dumps(run)

        args_json = [definition.name, debounce.key]
        run = json.loads(await body_effect("durable.debounce", args_json, start))
        return WorkflowHandle(self.store, run, definition.name)

    async def start_workflows(
        self,
        fn: Callable[..., Awaitable[R]],
        arguments: Iterable[Sequence[Any] | Mapping[str, Any] | WorkflowStart],
    ) -> list[WorkflowHandle[R]]:
        """Enqueue many instances in one statement: each item is a tuple of positional
        arguments, a mapping of keyword arguments, or a :class:`WorkflowStart` naming its
        workflow id too. All are written, or none."""
        definition = as_workflow(fn)
        rows, chosen = [], []
        for item in arguments:
            if isinstance(item, WorkflowStart):
                start = item
            elif isinstance(item, Mapping):
                start = WorkflowStart(kwargs=item)
            else:
                start = WorkflowStart(args=item)
            rows.append(self._prepare(definition, start.args, start.kwargs, 0.0, start.workflow_id))
            chosen.append(start.workflow_id is not None)
        return await self._enqueue(rows, chosen)

    async def send(
        self,
        workflow_id: str,
        message: Any,
        *,
        topic: str = "",
        idempotency_key: str | None = None,
    ) -> None:
        """Send ``message`` to workflow ``workflow_id``, to be taken by its ``recv(topic)``.

        A repeated send with the same ``idempotency_key`` delivers nothing more.
        """
        check_topic(topic)
        payload = encode(message, what=f"message to workflow {workflow_id}")
        ctx = body_context()
        if ctx is not None:
            await ctx.run.send(workflow_id, topic, payload, idempotency_key, self.store)
            return
        await self.store.send(workflow_id, topic, payload, idempotency_key or str(uuid.uuid4()))
        await message_sent(self.store, workflow_id, topic)

    async def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        timeout: float | timedelta | None = None,
        update_id: str | None = None,
    ) -> Any:
        """Send the update ``name`` with ``payload`` to a running workflow and return the
        body's reply (``recv_update(name)`` then ``req.reply(value)``). The same
        ``update_id`` sent again gets the same reply, the request handled once. Raises
        :class:`~durable_core.errors.UpdateRejectedError` (its validator refused it),
        :class:`~durable_core.errors.UpdateNotHandledError` (the workflow ended first) or
        :class:`~durable_core.errors.UpdateTimeoutError` (no reply within ``timeout``)."""
        return await update(
            self.store, workflow_id, name, payload, timeout=timeout, update_id=update_id
        )

    async def cancel(self, workflow_id: str) -> None:
        """Cancel a workflow and its unfinished children (see :meth:`WorkflowHandle.cancel`)."""
        await self.handle(workflow_id).cancel()

    def handle(self, workflow_id: str) -> WorkflowHandle[Any]:
        """A handle to an existing workflow."""
        return WorkflowHandle(self.store, workflow_id)

    async def set_attributes(
        self,
        workflow_id: str,
        values: Mapping[str, AttributeValue | None] | None = None,
        /,
        **more: AttributeValue | None,
    ) -> None:
        """Set workflow ``workflow_id``'s searchable attributes (see
        :meth:`WorkflowHandle.set_attributes`)."""
        await self.handle(workflow_id).set_attributes(values, **more)


async def start_workflow(
    fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
) -> WorkflowHandle[R]:
    """Enqueue ``fn(*args, **kwargs)`` on the bound store and return its handle."""
    return await DurableClient(current_store()).start_workflow(fn, *args, **kwargs)


async def start_workflow_with_id(
    workflow_id: str, fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
) -> WorkflowHandle[R]:
    """Start ``fn(*args, **kwargs)`` as ``workflow_id`` at most once, on the bound store."""
    return await DurableClient(current_store()).start_workflow_with_id(
        workflow_id, fn, *args, **kwargs
    )


async def start_workflows(
    fn: Callable[..., Awaitable[R]],
    arguments: Iterable[Sequence[Any] | Mapping[str, Any] | WorkflowStart],
) -> list[WorkflowHandle[R]]:
    """Enqueue many instances of ``fn`` in one statement on the bound store."""
    return await DurableClient(current_store()).start_workflows(fn, arguments)


def get_handle(workflow_id: str) -> WorkflowHandle[Any]:
    """A handle to an existing workflow on the bound store."""
    return WorkflowHandle(current_store(), workflow_id)


async def send(
    workflow_id: str, message: Any, *, topic: str = "", idempotency_key: str | None = None
) -> None:
    """Send ``message`` to a workflow's ``recv(topic)``, from anywhere. From a workflow
    body the send happens exactly once across replays; elsewhere, a repeated
    ``idempotency_key`` delivers nothing more."""
    check_topic(topic)  # a reserved topic (``durable.cancel``...) is refused on every path
    ctx = body_context()
    if ctx is None:
        await DurableClient(current_store()).send(
            workflow_id, message, topic=topic, idempotency_key=idempotency_key
        )
        return
    payload = encode(message, what=f"message to workflow {workflow_id}")
    await ctx.run.send(workflow_id, topic, payload, idempotency_key)
