"""The journal of an attempt: what a workflow body recorded, and where each new call stands.

Every durable call of a body (a step, a primitive, a wait) stands at a **path**: the name
of the branch that makes it (:mod:`.branches`: fixed when its task was created) and the
call's number in that branch. A body that runs sequentially makes its calls at ``"0"``,
``"1"``, ``"2"``...; the calls of the third task the body started stand at ``"2:0"``,
``"2:1"``... So a path depends only on the code's structure, never on which task the event
loop ran first, and a replay finds each branch's own results whatever order they come
back in.

A recorded call is a row of ``workflow_steps`` keyed by a step **index**, given in the
order calls are first made (the history reads in the order things happened). A row
whose path is its index's (every row of a sequential body) stores no path.

:meth:`Journal.check` is the replay rule: the call at a path must be the one recorded
there (same name; a step's same input), or the body broke the determinism contract. And
a replay never silently does new work while recorded work is left behind: once a branch
has ended without reaching calls recorded under its name (or without starting the
branch that made them), the next new call raises :class:`~durable_core.errors.HistoryDivergedError`
naming both.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Iterator
from contextvars import Token
from typing import Any

from ..errors import (
    ConfigurationError,
    HistoryDivergedError,
    StepInputMismatchError,
    StepNameMismatchError,
)
from ..seams.records import StepRecord, StepStatus
from . import branches
from .branches import Branch, branch_var, current_task

ID_NAMESPACE = uuid.UUID("6c1d4b8e-5f0a-4f43-9d57-2b9c61a1e7d3")
"""Ids derived from a workflow id and a call's path (children, messages) live here."""


NEW = object()
"""What the attempt's ``_step_input`` gives for a call the journal has no output for."""


def derived_id(workflow_id: str, path: str, item: int = 0) -> str:
    """The id of the ``item``-th thing made by the call at ``path`` of ``workflow_id``."""
    return str(uuid.uuid5(ID_NAMESPACE, f"{workflow_id}/{path}/{item}"))


class Call:
    """One durable call of a body: where it stands and what the journal holds there."""

    __slots__ = ("branch", "index", "name", "path", "recorded")

    def __init__(
        self,
        index: int,
        path: str,
        name: str,
        recorded: StepRecord | None,
        branch: Branch | None = None,
    ) -> None:
        self.index = index
        self.path = path
        self.name = name
        self.recorded = recorded
        self.branch = branch
        """The branch that makes it."""

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


def _split(path: str) -> tuple[str, int] | None:
    """``(branch prefix, call number)`` of a numbered path; ``None`` for a fixed one (a
    saga's ``P/undo``) or a path of another numbering."""
    if "/" in path:
        return None
    prefix, colon, number = path.rpartition(":")
    if not number.isdigit():
        return None
    return prefix + colon, int(number)


class Journal:
    """The recorded calls of one workflow by path, and the paths and indexes new calls take."""

    def __init__(self, workflow: str, steps: Iterable[StepRecord] = ()) -> None:
        self.workflow = workflow
        """``name (id)`` of the workflow, for errors."""
        self._by_path: dict[str, StepRecord] = {}
        self._next_index = 0
        self._numbered: dict[str, set[int]] = {}
        """The numbers of the recorded calls, by branch prefix (a branch makes its calls in
        order, so those below its count of calls it has made again)."""
        self._left: list[str] = []
        """Recorded calls this run can no longer reach (see :meth:`_branch_ended`)."""
        for step in steps:
            path = step.path or str(step.step_index)
            self._by_path[path] = step
            self._next_index = max(self._next_index, step.step_index + 1)
            if "/" in path:
                continue
            where = _split(path)
            if where is None:
                self._left.append(path)  # recorded under a numbering this code has not
            else:
                self._numbered.setdefault(where[0], set()).add(where[1])
        self._root: Branch | None = None
        self._branches: dict[asyncio.Future[Any], Branch] = {}
        """The live tasks of the body that are branches (not its own task)."""
        self.found = 0
        """How many calls found a record at their path (a replay check compares it with
        :attr:`recorded`)."""

    @property
    def recorded(self) -> int:
        """How many calls the history holds."""
        return len(self._by_path)

    # -- the branches ---------------------------------------------------------------------------

    def enter(self) -> Token[Branch | None]:
        """Make the current task the body's own branch; pass the token to :meth:`leave`."""
        branches.install()
        self._root = Branch(self, current_task(), "")
        return branch_var.set(self._root)

    @staticmethod
    def leave(token: Token[Branch | None]) -> None:
        """Undo :meth:`enter`."""
        branch_var.reset(token)

    def started(self, branch: Branch, task: asyncio.Future[Any]) -> None:
        """The body started ``task`` as ``branch`` (the task factory tells)."""
        self._branches[task] = branch
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        branch = self._branches.pop(task, None)
        if branch is not None and not task.cancelled():  # it returned or raised
            self._branch_ended(branch)

    def tasks(self) -> Iterator[asyncio.Future[Any]]:
        """The body's live tasks other than its own."""
        return iter(list(self._branches))

    def ready(self, running: object) -> bool:
        """Whether a task of the body other than ``running`` is ready to run."""
        root = self._root
        task = None if root is None else root.task
        if task is not None and task is not running and branches.runnable(task):
            return True
        return any(task is not running and branches.runnable(task) for task in self._branches)

    def _branch_ended(self, branch: Branch) -> None:
        """``branch`` returned or raised: the calls recorded under its name that it did not
        make, and those of the branches it did not start, can no longer be reached."""
        if not self._numbered:
            return  # a first run: nothing recorded to leave behind
        prefix, calls, spawned = branch.prefix, branch.calls, branch.spawned
        for owner, numbers in self._numbered.items():
            if not owner.startswith(prefix):
                continue
            if owner == prefix:
                left = [n for n in numbers if n >= calls]
                if left:
                    self._left.append(f"{owner}{min(left)}")
            elif int(owner[len(prefix) :].split(":", 1)[0]) >= spawned:
                self._left.append(f"{owner}{min(numbers)}")  # a branch it did not start

    def _here(self, name: str) -> Branch:
        """The branch of the running task."""
        branch = branch_var.get()
        if branch is None or branch.journal is not self or branch.task is not current_task():
            raise ConfigurationError(
                f"workflow {self.workflow} called {name!r} from a task it cannot place: "
                "a body's tasks are named as they are created (asyncio's task factory, "
                "which durable-core installs on the loop); a task made another way (a "
                "replaced task factory, an eager task factory, a thread) cannot make "
                "durable calls. Make the call from the body or a task it creates with "
                "asyncio.create_task, gather, TaskGroup or an anyio task group."
            )
        return branch

    # -- the calls ------------------------------------------------------------------------------

    def peek(self) -> StepRecord | None:
        """What the journal holds at the current branch's next path."""
        branch = self._here("a patch")
        return self._by_path.get(f"{branch.prefix}{branch.calls}")

    def next_path(self) -> str:
        """The path the current branch's next call will take."""
        branch = self._here("a saga")
        return f"{branch.prefix}{branch.calls}"

    def recorded_at(self, path: str) -> StepRecord | None:
        """What the journal holds at ``path``."""
        return self._by_path.get(path)

    def call(self, name: str, *, at: str | None = None) -> Call:
        """Take the next path for a call of ``name`` (or the path ``at``, outside the
        branches' numbering: a saga's compensations): its index, and what is recorded there.

        A new call while recorded calls can no longer be reached raises
        :class:`~durable_core.errors.HistoryDivergedError`."""
        branch = branch_var.get()
        if at is None:
            if branch is None or branch.journal is not self or branch.task is not current_task():
                branch = self._here(name)  # raises
            place = branch.calls
            branch.calls = place + 1
            path = f"{branch.prefix}{place}" if branch.prefix else str(place)
        else:
            path = at
        recorded = self._by_path.get(path)
        if recorded is None:
            if self._left:
                self._diverged(name, path)
            index = self._next_index
            self._next_index += 1
            return Call(index, path, name, None, branch)
        self.found += 1
        return Call(recorded.step_index, path, name, recorded, branch)

    def returned(self) -> None:
        """The body returned: raise :class:`~durable_core.errors.HistoryDivergedError` if
        it left recorded calls behind (its own, or those of branches it did not start)."""
        root = self._root
        if root is not None:
            self._branch_ended(root)
        if self._left:
            self._diverged(None, None)

    def _diverged(self, name: str | None, path: str | None) -> None:
        left = self._left[0]
        recorded = self._by_path[left]
        what = "returned" if name is None else f"made a new call {name!r} at path {path}"
        raise HistoryDivergedError(
            f"workflow {self.workflow} {what} while its history holds "
            f"{recorded.step_name!r} at path {left} (index {recorded.step_index}), which "
            "this run can no longer reach: the branch that made it has ended without making "
            "it, or was never started. A replay must start the same branches in the same "
            "order and make the same calls in each. Branches that share work by timing "
            "(several tasks taking items from one queue, the first to finish deciding what "
            "runs next) are not deterministic: give each branch its own inputs, or move the "
            "choice into a step.",
            index=recorded.step_index,
            path=left,
            recorded=recorded.step_name,
            called=name,
        )

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
                f"the same order on every run: move branching into a step{_shared(call)}.",
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
                "inputs must be deterministic: compute non-deterministic values inside a "
                f"step{_shared(call)}.",
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


def _shared(call: Call) -> str:
    """What to say of branches to a concurrent body (a call on a branch's path)."""
    if ":" not in call.path:
        return ""
    return (
        ". Branches must not share work by timing (several tasks taking items from one "
        "queue, or reading what another branch set): give each branch its own inputs"
    )
