"""Declaring workflows: the ``@workflow`` decorator and the registry it fills."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar, overload

from .. import durations
from ..errors import (
    ConfigurationError,
    DuplicateWorkflowError,
    InvalidArgumentsError,
    InvalidDeclaredDurationError,
    NotAWorkflowError,
    RegistrationError,
    UnknownWorkflowError,
)
from .queues import DEFAULT_QUEUE, Queue, queue_name
from .retention import Retention
from .retry import RetryPolicy
from .schedules import SCHEDULED_AT, Schedule

P = ParamSpec("P")
R = TypeVar("R")


def _no_body() -> bool:
    return False


body_running: Callable[[], bool] = _no_body
"""Whether the calling task runs a workflow body: set by the runtime (which sits above
this package) to :meth:`~durable_core.runtime.context.WorkflowContext.is_active`."""

_warned: set[str] = set()
"""The workflows whose direct call has been warned about (once each, per process)."""


class Workflow(Generic[P, R]):
    """A registered workflow. Calling it runs the body inline, with no persistence (outside
    a workflow, with a :class:`RuntimeWarning` the first time);
    :func:`~durable_core.caller.client.start_workflow` enqueues it for a worker."""

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]],
        *,
        name: str,
        max_attempts: int | None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        queue: str = DEFAULT_QUEUE,
        schedule: Schedule | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.fn = fn
        self.retention = retention
        """How long and how many of its settled runs are kept (``None``: its queue's policy)."""
        self.name = name
        self.retry = retry
        self.timeout = timeout
        self.queue = queue
        self.schedule = schedule
        """Started on every tick of this, once a worker has it (a schedule named ``name``)."""
        self.max_attempts = retry.max_attempts if retry is not None else max_attempts
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__qualname__ = getattr(fn, "__qualname__", name)
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        if self.name not in _warned and not body_running():
            _warned.add(self.name)
            module = self.__module__
            worker = (
                "a worker (define it in an importable module: a worker finds it by name)"
                if module == "__main__"
                else f"a worker (durable worker --app {module})"
            )
            warnings.warn(
                f"{self.__name__}() called directly runs its body here, inline: nothing is "
                "persisted, a failure is not retried and its waits really wait. To run it "
                f"durably, start it (await DurableClient(store).start_workflow({self.__name__}, "
                f"...)) and let {worker} or durable_core.testing.WorkflowRunner run it. "
                "(Said once per workflow.)",
                RuntimeWarning,
                stacklevel=2,
            )
        return self.fn(*args, **kwargs)

    @functools.cached_property
    def takes_scheduled_at(self) -> bool:
        """Whether it declares a ``scheduled_at`` parameter, which a schedule fills."""
        return SCHEDULED_AT in inspect.signature(self.fn).parameters

    def body_kwargs(self, kwargs: dict[str, Any], scheduled: datetime | None) -> dict[str, Any]:
        """``kwargs`` with the tick a schedule started this run for, where it is declared."""
        if scheduled is not None and self.takes_scheduled_at:
            kwargs.setdefault(SCHEDULED_AT, scheduled)
        return kwargs

    def __repr__(self) -> str:
        return f"<workflow {self.name}>"


class Registry:
    """Workflows by name. A name registered twice by different functions is a boot error."""

    def __init__(self) -> None:
        self._by_name: dict[str, list[Workflow[Any, Any]]] = {}
        self._queues: dict[str, Queue] = {DEFAULT_QUEUE: Queue(DEFAULT_QUEUE)}
        """Declared queues, by name."""

    def add_queue(self, queue: Queue) -> None:
        """Declare ``queue`` and its limits; one name has one set of limits."""
        if not isinstance(queue, Queue):
            raise RegistrationError(f"expected a Queue, got {queue!r}")
        if queue.name == DEFAULT_QUEUE and self._queues[DEFAULT_QUEUE] == Queue(DEFAULT_QUEUE):
            self._queues[DEFAULT_QUEUE] = queue  # the implicit default, declared now
        known = self._queues.setdefault(queue.name, queue)
        if known != queue:
            raise RegistrationError(
                f"queue {queue.name!r} is declared twice with different limits: "
                f"{known!r} and {queue!r}"
            )

    def queue(self, name: str) -> Queue:
        """The declared queue ``name``, or one without limits."""
        return self._queues.get(name) or Queue(name)

    def queues(self) -> list[Queue]:
        """The default queue, every declared queue and every queue a workflow names."""
        named = {self.queue(entries[0].queue) for entries in self._by_name.values()}
        every = {*self._queues.values(), *named}
        return sorted(every, key=lambda queue: queue.name)

    def add(self, definition: Workflow[Any, Any]) -> None:
        """Record a workflow; duplicates are kept so :meth:`assert_no_duplicates` can name them."""
        entries = self._by_name.setdefault(definition.name, [])
        if not any(_same_function(entry.fn, definition.fn) for entry in entries):
            entries.append(definition)

    def get(self, name: str, *, importer: str = "the worker") -> Workflow[Any, Any]:
        """The workflow registered under ``name``; the error for an unknown name asks whether
        ``importer`` imports the module that defines it."""
        entries = self._by_name.get(name)
        if not entries:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise UnknownWorkflowError(
                f"no registered workflow is named {name!r} (registered: {known}); "
                f"is the module that defines it imported by {importer}?"
            )
        if len(entries) > 1:
            self.assert_no_duplicates()
        return entries[0]

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._by_name)

    def assert_no_duplicates(self) -> None:
        """Fail loudly if two different functions share a workflow name."""
        clashes = {name: entries for name, entries in self._by_name.items() if len(entries) > 1}
        if not clashes:
            return
        lines = []
        for name, entries in sorted(clashes.items()):
            places = "; ".join(_where(entry.fn) for entry in entries)
            lines.append(f"{name!r} is registered by {len(entries)} functions: {places}")
        raise DuplicateWorkflowError(
            "duplicate workflow names (rename one, or pass @workflow(name=...)): "
            + " | ".join(lines)
        )

    def remove(self, name: str) -> None:
        """Forget a name (for tests that declare workflows dynamically)."""
        self._by_name.pop(name, None)


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (e.g. as __main__ and by name) yields distinct
    # function objects for one definition; treat them as the same function.
    if a is b:
        return True
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return (
        code_a is not None
        and code_b is not None
        and code_a.co_filename == code_b.co_filename
        and code_a.co_firstlineno == code_b.co_firstlineno
        and a.__qualname__ == b.__qualname__
    )


def _where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    location = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{fn.__module__}.{fn.__qualname__}{location}"


default_registry = Registry()


def qualified_name(fn: Callable[..., Any]) -> str:
    """``module.qualname``, the default name of a workflow or step."""
    return f"{fn.__module__}.{fn.__qualname__}"


@overload
def workflow(fn: Callable[P, Awaitable[R]], /) -> Workflow[P, R]: ...


@overload
def workflow(
    *,
    name: str | None = None,
    max_attempts: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
    queue: Queue | str | None = None,
    registry: Registry | None = None,
    schedule: Schedule | str | None = None,
    schedule_timezone: str | None = None,
    retention: Retention | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]: ...


def workflow(
    fn: Callable[P, Awaitable[R]] | None = None,
    /,
    *,
    name: str | None = None,
    max_attempts: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
    queue: Queue | str | None = None,
    registry: Registry | None = None,
    schedule: Schedule | str | None = None,
    schedule_timezone: str | None = None,
    retention: Retention | None = None,
) -> Workflow[P, R] | Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]:
    """Declare an ``async def`` as a durable workflow.

    It registers under ``module.qualname`` unless ``name`` is given.
    ``max_attempts`` fixes its attempt budget; otherwise each row gets the
    starting client's ``max_attempts`` or ``WORKFLOW_MAX_ATTEMPTS`` when it is started.
    ``retry`` replaces both the budget (its ``max_attempts``) and the linear backoff
    between attempts, and says which errors are retried at all. ``timeout`` cancels
    each run that has not ended that long after it was started (see
    :meth:`~durable_core.caller.client.DurableClient.with_options`). ``queue`` (a
    :class:`~durable_core.definitions.queues.Queue` with its limits, or a queue's name) is where
    its runs wait to be claimed; ``"default"`` otherwise.
    ``schedule`` (a cron expression, read in ``schedule_timezone`` or UTC, or a
    :class:`~durable_core.definitions.schedules.Schedule`) starts it on every tick once a worker
    that imports it runs: the schedule is named after the workflow. ``retention`` (a
    :class:`~durable_core.definitions.retention.Retention`) is how long and how many of
    its settled runs the fleet keeps; it wins over its queue's.
    """
    target = registry or default_registry
    try:
        home = DEFAULT_QUEUE if queue is None else queue_name(queue)
    except ConfigurationError as exc:
        raise RegistrationError(str(exc)) from None
    if isinstance(queue, Queue):
        target.add_queue(queue)

    def decorate(func: Callable[P, Awaitable[R]]) -> Workflow[P, R]:
        if not inspect.iscoroutinefunction(func):
            raise RegistrationError(
                f"@workflow needs an `async def`; {qualified_name(func)} is not one"
            )
        if max_attempts is not None and max_attempts < 1:
            raise RegistrationError(f"max_attempts must be at least 1, got {max_attempts}")
        if retry is not None and (max_attempts is not None or not isinstance(retry, RetryPolicy)):
            raise RegistrationError(
                f"retry must be a RetryPolicy, given without max_attempts (it has its own), "
                f"got retry={retry!r}, max_attempts={max_attempts!r}"
            )
        if retention is not None and not isinstance(retention, Retention):
            raise RegistrationError(f"retention must be a Retention, got {retention!r}")
        definition = Workflow(
            func,
            name=name or qualified_name(func),
            max_attempts=max_attempts,
            retry=retry,
            timeout=declared_timeout(timeout, "@workflow timeout"),
            queue=home,
            schedule=_schedule(schedule, schedule_timezone),
            retention=retention,
        )
        if definition.schedule is not None:
            try:
                check_arguments(
                    definition,
                    definition.schedule.args,
                    definition.schedule.kwargs,
                    scheduled=True,
                )
            except InvalidArgumentsError as exc:
                raise RegistrationError(str(exc)) from None
        target.add(definition)
        return definition

    return decorate if fn is None else decorate(fn)


def _schedule(schedule: Schedule | str | None, timezone: str | None) -> Schedule | None:
    if isinstance(schedule, Schedule) and timezone is not None:
        raise RegistrationError("give the time zone in the Schedule, not in schedule_timezone")
    try:
        if isinstance(schedule, str):
            return Schedule(schedule, timezone or "UTC")
    except ConfigurationError as exc:
        raise RegistrationError(str(exc)) from None
    if schedule is not None and not isinstance(schedule, Schedule):
        raise RegistrationError(f"schedule is a cron expression or a Schedule, got {schedule!r}")
    if schedule is None and timezone is not None:
        raise RegistrationError("schedule_timezone needs a schedule")
    return schedule


def declared_timeout(value: float | timedelta | None, what: str) -> float | None:
    """A declaration's timeout in seconds (``None``: none), by the one rule of
    :func:`durable_core.durations.seconds`: positive, at most 100 years."""
    if value is None:
        return None
    return durations.seconds(value, what, allow_zero=False, error=InvalidDeclaredDurationError)


def check_arguments(
    definition: Workflow[Any, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    scheduled: bool = False,
) -> None:
    """Raise :class:`InvalidArgumentsError` unless ``args`` and ``kwargs`` fit the workflow
    (with ``scheduled``, a ``scheduled_at`` parameter is the schedule's to fill)."""
    signature = inspect.signature(definition.fn)
    if scheduled and SCHEDULED_AT in signature.parameters and SCHEDULED_AT not in kwargs:
        kwargs = {**kwargs, SCHEDULED_AT: None}
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidArgumentsError(
            f"arguments do not fit workflow {definition.name}: {exc}"
        ) from None


def as_workflow(fn: object) -> Workflow[Any, Any]:
    """Check that ``fn`` was declared with ``@workflow``."""
    if isinstance(fn, Workflow):
        return fn
    label = getattr(fn, "__qualname__", repr(fn))
    raise NotAWorkflowError(f"{label} is not a workflow: decorate it with @workflow")
