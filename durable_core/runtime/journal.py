"""The journal of an attempt: what a workflow body recorded, and where each new call stands.

Every durable call of a body (a step, a primitive, a wait) stands at a **path**: its
place in the body's call order. A body that runs sequentially makes its calls at
``"0"``, ``"1"``, ``"2"``... A body that runs branches concurrently (``asyncio.gather``,
an anyio task group) gives each branch the next place of the task that started it,
in the order the branches first call: the calls of the branch at ``"4"`` stand at
``"4.0"``, ``"4.1"``... So a path does not depend on when other branches' calls end,
and a replay finds each branch's own results whatever order they come back in.

A recorded call is a row of ``workflow_steps`` keyed by a step **index**, given in the
order calls are first made (the history reads in the order things happened). A row
whose path is its index's (every row of a sequential body) stores no path.

:meth:`Journal.check` is the one replay rule: the call at a path must be the one
recorded there (same name; a step's same input), or the body broke the determinism
contract.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

import anyio

from ..errors import StepInputMismatchError, StepNameMismatchError
from ..seams.records import StepRecord, StepStatus

ID_NAMESPACE = uuid.UUID("6c1d4b8e-5f0a-4f43-9d57-2b9c61a1e7d3")
"""Ids derived from a workflow id and a call's path (children, messages) live here."""


def derived_id(workflow_id: str, path: str, item: int = 0) -> str:
    """The id of the ``item``-th thing made by the call at ``path`` of ``workflow_id``."""
    return str(uuid.uuid5(ID_NAMESPACE, f"{workflow_id}/{path}/{item}"))


def _task() -> object:
    """The running task, for telling a body's branches apart."""
    try:
        return current_task()
    except RuntimeError:  # not on asyncio
        return anyio.get_current_task().id


current_task = asyncio.current_task


@dataclass(eq=False, slots=True)
class _Branch:
    """Where the next call of one task of a body stands."""

    journal: Journal
    task: object
    prefix: str
    next: int = 0


_branch: ContextVar[_Branch | None] = ContextVar("durable_branch", default=None)


class Call:
    """One durable call of a body: where it stands and what the journal holds there."""

    __slots__ = ("index", "name", "path", "recorded")

    def __init__(self, index: int, path: str, name: str, recorded: StepRecord | None) -> None:
        self.index = index
        self.path = path
        self.name = name
        self.recorded = recorded

    @property
    def stored_path(self) -> str | None:
        """The path to store with its row: ``None`` when it is the index's own."""
        return None if self.path == str(self.index) else self.path

    @property
    def output(self) -> str | None:
        """The recorded output when the call ended before (a replay returns it)."""
        recorded = self.recorded
        if recorded is not None and recorded.status is StepStatus.SUCCEEDED:
            return recorded.output
        return None


class Journal:
    """The recorded calls of one workflow by path, and the paths and indexes new calls take."""

    def __init__(self, workflow: str, steps: Iterable[StepRecord] = ()) -> None:
        self.workflow = workflow
        """``name (id)`` of the workflow, for errors."""
        self._by_path: dict[str, StepRecord] = {}
        self._next_index = 0
        for step in steps:
            self._by_path[step.path or str(step.step_index)] = step
            self._next_index = max(self._next_index, step.step_index + 1)
        self._root: _Branch | None = None
        self.found = 0
        """How many calls found a record at their path (a replay check compares it with
        :attr:`recorded`)."""

    @property
    def recorded(self) -> int:
        """How many calls the history holds."""
        return len(self._by_path)

    def enter(self) -> Token[_Branch | None]:
        """Make the current task the body's root branch; pass the token to :meth:`leave`."""
        self._root = _Branch(self, _task(), "")
        return _branch.set(self._root)

    @staticmethod
    def leave(token: Token[_Branch | None]) -> None:
        """Undo :meth:`enter`."""
        _branch.reset(token)

    def _here(self) -> _Branch:
        """The current task's branch; a task met for the first time opens a branch of the
        task that started it, at that task's next place."""
        branch = _branch.get()
        if branch is None or branch.journal is not self:
            branch = self._root
            assert branch is not None, "the body runs between enter() and leave()"
        try:
            task: object = current_task()
        except RuntimeError:
            task = _task()
        if branch.task is not task:
            place = branch.next
            branch.next += 1
            branch = _Branch(self, task, f"{branch.prefix}{place}.")
            _branch.set(branch)
        return branch

    def peek(self) -> StepRecord | None:
        """What the journal holds at the current branch's next path."""
        branch = self._here()
        return self._by_path.get(f"{branch.prefix}{branch.next}")

    def next_path(self) -> str:
        """The path the current branch's next call will take."""
        branch = self._here()
        return f"{branch.prefix}{branch.next}"

    def recorded_at(self, path: str) -> StepRecord | None:
        """What the journal holds at ``path``."""
        return self._by_path.get(path)

    def call(self, name: str, *, at: str | None = None) -> Call:
        """Take the next path for a call of ``name`` (or the path ``at``, outside the
        branches' numbering: a saga's compensations): its index, and what is recorded there."""
        if at is None:
            branch = self._here()
            place = branch.next
            branch.next = place + 1
            path = f"{branch.prefix}{place}" if branch.prefix else str(place)
        else:
            path = at
        recorded = self._by_path.get(path)
        if recorded is None:
            index = self._next_index
            self._next_index += 1
            return Call(index, path, name, None)
        self.found += 1
        return Call(recorded.step_index, path, name, recorded)

    def check(self, call: Call, input_json: str | None = None, *, step: bool = False) -> None:
        """The replay rule: raise :class:`StepNameMismatchError` when another call is
        recorded at ``call``'s path, and :class:`StepInputMismatchError` when a step's
        ``input_json`` differs from the input it ended with there."""
        recorded = call.recorded
        if recorded is None:
            return
        what = f"step {call.name!r}" if step else call.name
        if recorded.step_name != call.name:
            had = f"step {recorded.step_name!r}" if step else repr(recorded.step_name)
            raise StepNameMismatchError(
                f"workflow {self.workflow} called {what} at index {call.index}{_at(call)}, "
                f"but its history has {had} there. The body must make the same calls in "
                "the same order on every run: move branching into a step.",
                **_where(call),
            )
        if (
            input_json is not None
            and recorded.status is StepStatus.SUCCEEDED
            and recorded.input != input_json
        ):
            raise StepInputMismatchError(
                f"workflow {self.workflow} replayed {what} at index {call.index}{_at(call)} "
                f"with input {input_json} but it first ran with {recorded.input}. Step "
                "inputs must be deterministic: compute non-deterministic values inside a step.",
                **_where(call),
            )


def _where(call: Call) -> dict[str, Any]:
    recorded = call.recorded
    return {
        "index": call.index,
        "path": call.path,
        "recorded": None if recorded is None else recorded.step_name,
        "called": call.name,
    }


def _at(call: Call) -> str:
    return "" if call.stored_path is None else f" (branch path {call.path})"
