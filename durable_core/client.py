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
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from .config import WorkflowConfig
from .context import WorkflowContext
from .errors import ConfigurationError, InvalidArgumentsError
from .handle import WorkflowHandle
from .hooks import observers
from .records import NewWorkflow
from .registry import Workflow, as_workflow
from .serialization import encode_arguments
from .store import Store

P = ParamSpec("P")
R = TypeVar("R")

_ambient: ContextVar[Store | None] = ContextVar("durable_ambient_store", default=None)
_default: list[Store] = []


def new_workflow_id() -> str:
    """A UUIDv7 string: time-ordered, so inserts land at the end of the primary-key index."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def set_default_store(store: Store | None) -> None:
    """Bind ``store`` as the process-wide default (``None`` unbinds it)."""
    _default[:] = [] if store is None else [store]


@contextmanager
def use_store(store: Store) -> Iterator[Store]:
    """Bind ``store`` as the default for the current task and the tasks it starts."""
    token = _ambient.set(store)
    try:
        yield store
    finally:
        _ambient.reset(token)


def current_store() -> Store:
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


def _default_max_attempts() -> int:
    if "WORKFLOW_MAX_ATTEMPTS" in os.environ:
        return WorkflowConfig.from_env().max_attempts
    return WorkflowConfig().max_attempts


class DurableClient:
    """Starts workflows on one store and hands out handles to them."""

    def __init__(self, store: Store, *, max_attempts: int | None = None) -> None:
        if max_attempts is not None and max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be at least 1, got {max_attempts}")
        self.store = store
        self.max_attempts = max_attempts

    def _prepare(
        self,
        definition: Workflow[Any, Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        delay_seconds: float,
    ) -> NewWorkflow:
        try:
            _signature(definition.fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentsError(
                f"arguments do not fit workflow {definition.name}: {exc}"
            ) from None
        if delay_seconds < 0:
            raise ConfigurationError(f"delay must not be negative, got {delay_seconds}")
        payload = encode_arguments(
            tuple(args), dict(kwargs), what=f"arguments of workflow {definition.name}"
        )
        return NewWorkflow(
            id=new_workflow_id(),
            name=definition.name,
            input=payload,
            max_attempts=definition.max_attempts or self.max_attempts or _default_max_attempts(),
            delay_seconds=delay_seconds,
        )

    async def _enqueue(self, rows: list[NewWorkflow]) -> None:
        await self.store.enqueue(rows)
        for row in rows:
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
        row = self._prepare(definition, args, kwargs, 0.0)
        await self._enqueue([row])
        return WorkflowHandle(self.store, row.id, row.name)

    async def start_workflow_later(
        self, delay_seconds: float, fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> WorkflowHandle[R]:
        """Like :meth:`start_workflow`, due ``delay_seconds`` from now."""
        definition = as_workflow(fn)
        row = self._prepare(definition, args, kwargs, delay_seconds)
        await self._enqueue([row])
        return WorkflowHandle(self.store, row.id, row.name)

    async def start_workflows(
        self,
        fn: Callable[..., Awaitable[R]],
        arguments: Iterable[Sequence[Any] | Mapping[str, Any]],
    ) -> list[WorkflowHandle[R]]:
        """Enqueue many instances in one statement: each item is a tuple of positional
        arguments or a mapping of keyword arguments. All are written, or none."""
        definition = as_workflow(fn)
        rows = []
        for item in arguments:
            if isinstance(item, Mapping):
                rows.append(self._prepare(definition, (), item, 0.0))
            else:
                rows.append(self._prepare(definition, item, {}, 0.0))
        await self._enqueue(rows)
        return [WorkflowHandle(self.store, row.id, row.name) for row in rows]

    def handle(self, workflow_id: str) -> WorkflowHandle[Any]:
        """A handle to an existing workflow."""
        return WorkflowHandle(self.store, workflow_id)


async def start_workflow(
    fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
) -> WorkflowHandle[R]:
    """Enqueue ``fn(*args, **kwargs)`` on the bound store and return its handle."""
    return await DurableClient(current_store()).start_workflow(fn, *args, **kwargs)


async def start_workflows(
    fn: Callable[..., Awaitable[R]], arguments: Iterable[Sequence[Any] | Mapping[str, Any]]
) -> list[WorkflowHandle[R]]:
    """Enqueue many instances of ``fn`` in one statement on the bound store."""
    return await DurableClient(current_store()).start_workflows(fn, arguments)


def get_handle(workflow_id: str) -> WorkflowHandle[Any]:
    """A handle to an existing workflow on the bound store."""
    return WorkflowHandle(current_store(), workflow_id)
