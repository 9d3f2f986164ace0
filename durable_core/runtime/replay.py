"""The replay check: would new code replay the recorded histories of workflows in flight?

Given a registry holding the new code, each history (a workflow's name, input and
recorded calls, read from a database or from a file ``durable export`` wrote) is
replayed through the real attempt with nothing run and nothing written: every call
must find its own record (the determinism contract), and a branch stops at the first
call its history has not ended (where the live run would go on). A divergence names
the workflow, the step index and the recorded and new calls; a body that raises
before its history ends, or returns while some of it is left unvisited, diverges too.

``durable replay-check`` runs it from CI before a deploy; :func:`check_histories` is the
same from a test over exported files.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel
import anyio.to_thread

from ..codec import decode_arguments
from ..codec.failures import error_record
from ..definitions.registry import Registry, default_registry
from ..durations import utcnow
from ..errors import (
    ConfigurationError,
    DeterminismError,
    FrameworkError,
    WorkflowNotFoundError,
    leaf_errors,
)
from ..seams.records import ClaimedWorkflow, Lease, StepRecord, StepStatus, WorkflowStatus
from ..seams.store import Store
from .attempt import Attempt
from .branches import runnable
from .config import WorkflowConfig
from .context import WorkflowContext

FORMAT = "durable-history/1"
"""The ``format`` of an exported history file."""

IN_FLIGHT = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.WAITING)

_STALL_ROUNDS = 20
"""Turns of the event loop with no call replayed after which every branch has stopped: a
replay runs no I/O, so its branches only ever wait for each other."""


@dataclass(frozen=True)
class History:
    """What a replay needs of one workflow: its name, input and recorded calls."""

    workflow_id: str
    workflow_name: str
    input: str
    steps: tuple[StepRecord, ...] = ()
    headers: Mapping[str, str] | None = None
    status: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The history as the JSON object ``durable export`` writes."""
        return {
            "format": FORMAT,
            "workflow_id": self.workflow_id,
            "workflow_name": self.workflow_name,
            "status": self.status,
            "input": self.input,
            "headers": dict(self.headers) if self.headers else None,
            "steps": [
                {
                    "index": s.step_index,
                    "path": s.path,
                    "name": s.step_name,
                    "status": s.status.value,
                    "input": s.input,
                    "output": s.output,
                }
                for s in self.steps
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "history") -> History:
        """Read a history ``durable export`` wrote; :class:`ConfigurationError` naming
        ``source`` when it is not one."""
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"its format is {data.get('format')!r}, not {FORMAT!r}")
            steps = tuple(
                StepRecord(
                    int(s["index"]),
                    str(s["name"]),
                    StepStatus(s["status"]),
                    str(s["input"]),
                    s.get("output"),
                    path=s.get("path"),
                )
                for s in data["steps"]
            )
            return cls(
                workflow_id=str(data["workflow_id"]),
                workflow_name=str(data["workflow_name"]),
                input=str(data["input"]),
                steps=steps,
                headers=data.get("headers"),
                status=data.get("status"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"{source} is not a workflow history: {exc}") from None


@dataclass(frozen=True)
class Divergence:
    """Where new code leaves a recorded history."""

    workflow_id: str
    workflow_name: str
    message: str
    step_index: int | None = None
    path: str | None = None
    recorded: str | None = None
    """The call the history holds there."""
    called: str | None = None
    """The call the new code made there."""

    def as_json(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "workflow_name": self.workflow_name,
            "step_index": self.step_index,
            "path": self.path,
            "recorded": self.recorded,
            "called": self.called,
            "message": self.message,
        }


@dataclass
class Report:
    """What a replay check found: how many histories it replayed, and every divergence."""

    checked: int = 0
    divergences: list[Divergence] = field(default_factory=list)


class _NoStore:
    """What a replay's attempt runs on: a store that plays every role (so a primitive may
    look up the role it would use) and refuses every call (a replay never gets to make one)."""

    description = "no store (a replay check writes nothing)"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise FrameworkError(
                f"a replay check touched the store ({name}); it must write nothing"
            )

        return refuse


DEADLINE = 60.0
"""Seconds a replay may take before the check gives up on it and reports it."""


async def replay(
    history: History, registry: Registry | None = None, *, deadline: float = DEADLINE
) -> Divergence | None:
    """Replay ``history`` through the workflow of that name in ``registry`` (the default
    registry): ``None`` when the code follows it, else where it leaves it.

    The body runs in a thread of its own, on an event loop of its own, so nothing it does
    can hold the check: a replay that has not ended after ``deadline`` seconds (a body
    blocked on something that is not durable, in a shielded scope) is left behind and
    reported as a divergence."""
    registry = registry or default_registry
    result: concurrent.futures.Future[Divergence | None] = concurrent.futures.Future()

    def run() -> None:
        try:
            asyncio.run(_replay(history, registry, result))
        except BaseException as exc:  # a body that broke the loop itself
            if not result.done():
                result.set_exception(exc)

    threading.Thread(target=run, name=f"replay {history.workflow_id}", daemon=True).start()
    wait = functools.partial(result.result, timeout=deadline)
    try:
        return await anyio.to_thread.run_sync(wait, abandon_on_cancel=True)
    except concurrent.futures.TimeoutError:
        return Divergence(
            history.workflow_id,
            history.workflow_name,
            f"the replay did not end within {deadline:g}s: the new code blocks on something "
            "that is not durable (and cannot be cancelled) before its history ends",
        )


async def _replay(
    history: History,
    registry: Registry,
    result: concurrent.futures.Future[Divergence | None],
) -> None:
    """:func:`replay` on the replay's own loop: its outcome into ``result``."""
    try:
        found = await _replayed(history, registry)
    except BaseException as exc:
        result.set_exception(exc)
        raise
    result.set_result(found)


async def _replayed(history: History, registry: Registry) -> Divergence | None:
    def diverged(message: str, **where: Any) -> Divergence:
        return Divergence(history.workflow_id, history.workflow_name, message, **where)

    try:
        definition = registry.get(history.workflow_name, importer="the new code")
        args, kwargs = decode_arguments(
            history.input, what=f"input of workflow {history.workflow_id}"
        )
    except FrameworkError as exc:
        return diverged(str(exc))
    claimed = ClaimedWorkflow(
        id=history.workflow_id,
        name=history.workflow_name,
        input=history.input,
        attempts=1,
        max_attempts=1,
        lease=Lease(history.workflow_id, "replay", "replay-check"),
        steps=history.steps,
        headers=history.headers,
    )
    attempt = Attempt(cast(Store, _NoStore()), WorkflowConfig(), claimed, utcnow)
    attempt.replaying = True
    over = attempt.replay_over = anyio.Event()
    await attempt.load_history()
    ctx = WorkflowContext.of(attempt)
    kwargs = definition.body_kwargs(kwargs, ctx.scheduled_at)
    journal = attempt.journal
    outcome: list[BaseException | None] = []

    async def body() -> None:
        token = ctx.activate()
        branch = journal.enter()
        try:
            with attempt.body_scope:
                await definition.fn(*args, **kwargs)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            journal.leave(branch)
            ctx.deactivate(token)

    task = asyncio.get_running_loop().create_task(body())
    still, seen = 0, -1
    while not task.done() and still < _STALL_ROUNDS:
        await anyio.lowlevel.checkpoint()
        progressed = journal.found != seen or any(runnable(t) for t in journal.tasks())
        still = 0 if progressed else still + 1
        seen = journal.found
    over.set()  # every branch has gone as far as its history goes: each unwinds
    attempt.body_scope.cancel()
    for branch_task in journal.tasks():
        branch_task.cancel()
    await asyncio.wait({task})
    failure = _failure(outcome[0]) if outcome else None
    if isinstance(failure, DeterminismError):
        return diverged(
            str(failure),
            step_index=failure.index,
            path=failure.path,
            recorded=failure.recorded,
            called=failure.called,
        )
    if failure is not None:
        record = error_record(failure)
        return diverged(
            f"the new code raised {record['type']}: {failure} after replaying "
            f"{journal.found} of its {journal.recorded} recorded calls"
        )
    if outcome and outcome[0] is None and journal.found < journal.recorded:
        return diverged(
            f"the new code returned after replaying {journal.found} of the "
            f"{journal.recorded} recorded calls: it no longer makes the others"
        )
    return None


def _failure(exc: BaseException | None) -> BaseException | None:
    """What a replayed body's end says of the new code: ``None`` when it only stopped where
    its history ends (or was stopped there), else the error it raised (a determinism
    error first, from inside an exception group)."""
    if exc is None:
        return None
    errors = [e for e in leaf_errors(exc) if isinstance(e, Exception)]
    if not errors:
        return None  # branches stopped at the end of the history, or cancelled there
    for error in errors:
        if isinstance(error, DeterminismError):
            return error
    return errors[0]


async def export(store: Store, workflow_id: str) -> History:
    """The history of ``workflow_id`` in ``store``."""
    record = await store.get_workflow(workflow_id)
    if record is None:
        raise WorkflowNotFoundError(f"no workflow with id {workflow_id!r} in {store.description}")
    steps = await store.load_steps(workflow_id)
    return History(
        workflow_id=record.id,
        workflow_name=record.name,
        input=record.input,
        steps=tuple(steps),
        headers=record.headers,
        status=record.status.value,
    )


async def replay_check(
    store: Store,
    registry: Registry | None = None,
    *,
    workflow_ids: Sequence[str] | None = None,
    statuses: Iterable[WorkflowStatus] = IN_FLIGHT,
    names: Sequence[str] | None = None,
    page: int = 500,
    deadline: float = DEADLINE,
) -> Report:
    """Replay the history of every workflow in ``store`` with one of ``statuses`` (those
    in flight), or only ``workflow_ids``, through ``registry`` (each within ``deadline``
    seconds, see :func:`replay`)."""
    report = Report()
    if workflow_ids is not None:
        ids: list[str] = list(workflow_ids)
    else:
        ids = []
        wanted: Sequence[str | None] = names or (None,)
        for status in statuses:
            for name in wanted:
                before: str | None = None
                while True:
                    rows = await store.list_workflows(
                        status=status, name=name, limit=page, before=before
                    )
                    ids.extend(r.id for r in rows)
                    if len(rows) < page:
                        break
                    before = rows[-1].id
    for workflow_id in ids:
        found = await replay(await export(store, workflow_id), registry, deadline=deadline)
        report.checked += 1
        if found is not None:
            report.divergences.append(found)
    return report


def read_history(path: str | Path) -> History:
    """The history in the file ``path`` (written by ``durable export``)."""
    source = Path(path)
    try:
        data = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the history {source}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{source} is not a workflow history: not a JSON object")
    return History.from_json(data, source=str(source))


async def check_histories(
    paths: Iterable[str | Path], registry: Registry | None = None, *, deadline: float = DEADLINE
) -> list[Divergence]:
    """Replay exported history files through ``registry``: every divergence (none: the
    code can be deployed beside them). For a test::

        async def test_new_code_replays_production_histories():
            assert await check_histories(Path("histories").glob("*.json")) == []
    """
    found = []
    for path in paths:
        divergence = await replay(read_history(path), registry, deadline=deadline)
        if divergence is not None:
            found.append(divergence)
    return found
