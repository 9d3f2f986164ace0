"""Branches: the tasks of a workflow body, each named when it is created.

A body may run concurrently (``asyncio.gather``, ``asyncio.create_task``, ``asyncio.TaskGroup``,
anyio task groups). Each task it starts is a **branch**, and a branch's place in the
journal must not depend on timing: a replay returns recorded calls at once, so branches
reach their calls in another order than they did the first time. So a branch is named
when it is *created*, from the code's structure: the ``k``-th task a branch starts has
the prefix ``<its prefix>k:``, and each branch numbers its own durable calls ``0``, ``1``...
The body's own task has the empty prefix, so a body that runs sequentially makes its
calls at ``"0"``, ``"1"``, ``"2"``... and the third task it starts makes its first call
at ``"2:0"``.

Naming a task at its creation takes asyncio's **task factory**, the one hook every task
creation passes through (``loop.create_task``: ``asyncio.gather``, ``create_task``,
``TaskGroup``, anyio's task groups). This is the one place the runtime needs asyncio
rather than anyio: anyio has no such hook, and the drivers (asyncpg, aiosqlite,
aiomysql) run only on asyncio anyway. :func:`install` puts the factory on the running
loop once (keeping a factory already there, which still makes the task); it acts only
when a workflow body creates a task, and costs other tasks one context lookup.

Tasks created while a branch is inside a durable call (a step's own tasks, a driver's
tasks during a write) are no branches: they are not counted, so what a step does inside
cannot shift the names of the branches started after it (a replay does not run the step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context, ContextVar, copy_context
from typing import Any, Protocol, TypeVar

current_task = asyncio.current_task

T = TypeVar("T")


class Owner(Protocol):
    """What a branch belongs to (the body's :class:`~durable_core.runtime.journal.Journal`)."""

    def started(self, branch: Branch, task: asyncio.Future[Any]) -> None:
        """The body started ``task`` as ``branch``."""
        ...


class Branch:
    """One task of a workflow body: its name (prefix), its next call, the tasks it started."""

    __slots__ = ("calls", "journal", "prefix", "quiet", "spawned", "task")

    def __init__(self, journal: Owner, task: asyncio.Future[Any] | None, prefix: str) -> None:
        self.journal = journal
        self.task = task
        self.prefix = prefix
        """``""`` for the body's own task, ``"2:"`` for the third task it started, ..."""
        self.calls = 0
        """How many durable calls this branch has made (its next call's number)."""
        self.spawned = 0
        """How many branches this branch has started."""
        self.quiet = 0
        """Durable calls of this branch under way: tasks created meanwhile are no branches."""

    def __repr__(self) -> str:
        return f"<branch {self.prefix or 'body'}>"

    def spawn(self) -> Branch:
        """The branch of the next task this branch starts."""
        child = Branch(self.journal, None, f"{self.prefix}{self.spawned}:")
        self.spawned += 1
        return child


branch_var: ContextVar[Branch | None] = ContextVar("durable_branch", default=None)
"""The branch the running task is (``None`` outside a workflow body)."""


TaskFactory = Callable[..., "asyncio.Future[Any]"]


class _BranchFactory:
    """The task factory that names a body's tasks as they are created."""

    __slots__ = ("previous",)

    def __init__(self, previous: TaskFactory | None) -> None:
        self.previous = previous

    def __call__(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Generator[Any, None, T] | Coroutine[Any, Any, T],
        /,
        **kwargs: Any,
    ) -> asyncio.Future[T]:
        parent = branch_var.get()
        if parent is None:
            return self._make(loop, coro, kwargs)
        given: Context | None = kwargs.pop("context", None)
        context = copy_context() if given is None else given.copy()  # never the caller's own
        if parent.quiet or parent.task is not current_task(loop):
            # A task made inside a durable call (or by a task that is no branch) is no branch.
            context.run(branch_var.set, None)
            kwargs["context"] = context
            return self._make(loop, coro, kwargs)
        child = parent.spawn()
        context.run(branch_var.set, child)
        kwargs["context"] = context
        task = self._make(loop, coro, kwargs)
        child.task = task
        parent.journal.started(child, task)
        return task

    def _make(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Generator[Any, None, T] | Coroutine[Any, Any, T],
        kwargs: Any,
    ) -> asyncio.Future[T]:
        previous = self.previous
        if previous is None:
            return asyncio.Task(coro, loop=loop, **kwargs)
        context: Context | None = kwargs.pop("context", None)
        if context is None:
            return previous(loop, coro, **kwargs)
        # A factory of Python 3.11's shape takes no context: it makes its task in this one.
        return context.run(previous, loop, coro, **kwargs)


def install(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Put the branch-naming task factory on ``loop`` (the running one), once."""
    loop = loop or asyncio.get_running_loop()
    factory = loop.get_task_factory()
    if isinstance(factory, _BranchFactory):
        return
    loop.set_task_factory(_BranchFactory(factory))


def installed(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` names a body's tasks (another factory may have replaced ours)."""
    return isinstance(loop.get_task_factory(), _BranchFactory)


def runnable(task: asyncio.Future[Any]) -> bool:
    """Whether ``task`` is ready to run (not done, not waiting on a future)."""
    return not task.done() and getattr(task, "_fut_waiter", None) is None
