"""What a new user meets in the first hour: the messages, the version, the runner's helpers."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import warnings
from pathlib import Path

import anyio
import pytest

import durable_core
from durable_core import (
    DeterminismError,
    DurableClient,
    StepInputMismatchError,
    UpdateNotHandledError,
    UpdateRejectedError,
    WorkflowStatus,
    now,
    recv_update,
    set_event,
    sleep,
    workflow,
    workflow_step,
)
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_installed_distributions() -> None:
    assert durable_core.__version__ == importlib.metadata.version("durable-core")
    done = subprocess.run(
        [sys.executable, "-m", "durable_core", "--version"], capture_output=True, text=True
    )
    assert done.stdout == f"durable {durable_core.__version__}\n"


@workflow
async def called_directly(n: int) -> int:
    return n + 1


@workflow
async def calls_another_directly(n: int) -> int:
    return await called_directly(n)  # inline, inside a body: no warning


async def test_a_direct_call_outside_a_workflow_warns_once_with_the_way_to_run_it(
    sqlite_store: SQLiteStore,
) -> None:
    with pytest.warns(RuntimeWarning) as caught:
        assert await called_directly(1) == 2
    [warning] = caught
    message = str(warning.message)
    assert message.startswith("called_directly() called directly runs its body here, inline")
    assert "start_workflow(called_directly, ...)" in message
    assert f"durable worker --app {__name__}" in message
    assert "WorkflowRunner" in message
    assert warning.filename == __file__  # it points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert await called_directly(2) == 3  # once per workflow: no second warning
        handle = await DurableClient(sqlite_store).start_workflow(calls_another_directly, 5)
        assert await WorkflowRunner(sqlite_store).run_until_complete(handle) is (
            WorkflowStatus.SUCCEEDED
        )
        assert await handle.output() == 6


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        (["--app", "wf.py"], "--app wf?"),
        (["--app", "./myapp/workflows.py"], "--app myapp.workflows?"),
        (["--app", "ok", "--bootstrap", "myapp/boot.py:setup"], "--bootstrap myapp.boot:setup?"),
    ],
)
def test_a_file_path_given_for_a_module_says_which_module_it_means(
    given: list[str], meant: str, tmp_path: Path
) -> None:
    (tmp_path / "wf.py").write_text("raise SystemExit('imported')\n")  # a path is not imported
    (tmp_path / "ok.py").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "durable_core", "worker", *given,
         "--database-url", f"sqlite:///{tmp_path / 'x.db'}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("durable: error: --")
    assert "takes a module name, not a file" in line and f"did you mean {meant}" in line


GREETING = ["hello"]


@workflow_step
async def greet(greeting: str) -> str:
    return greeting


@workflow_step
async def fail_once(attempt: int) -> None:
    if attempt == 1:
        raise RuntimeError("transient")


@workflow(max_attempts=3)
async def drifting() -> str:
    text = await greet(GREETING[0])
    await fail_once(len(GREETING))
    return text


async def test_a_determinism_error_points_to_now_random_and_patched(
    sqlite_store: SQLiteStore,
) -> None:
    runner = WorkflowRunner(sqlite_store)
    handle = await DurableClient(sqlite_store).start_workflow(drifting)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    GREETING[0] = "bonjour"  # what the body read changed between attempts
    try:
        assert await runner.run_once(handle) is WorkflowStatus.FAILED
    finally:
        GREETING[0] = "hello"
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.StepInputMismatchError"
    message = error["message"]
    assert "use durable_core.now() and durable_core.random()" in message
    assert "guard it with patched()" in message
    # Raised again (as a parent reading its child does), the hint is not repeated.
    again = StepInputMismatchError(message)
    assert str(again) == message and isinstance(again, DeterminismError)


def positive(amount: int) -> None:
    if amount <= 0:
        raise ValueError(f"the amount must be positive, got {amount}")


@workflow
async def expense(limit: int) -> int:
    await sleep(3600)  # the runner's clock skips it
    req = await recv_update("approve", validate=positive)
    assert req is not None
    approved = min(int(req.payload), limit)
    await req.reply({"approved": approved})
    return approved


async def test_the_runner_answers_an_update_by_running_the_workflow(
    sqlite_store: SQLiteStore,
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(expense, 100)
    runner = WorkflowRunner(sqlite_store)
    with pytest.raises(UpdateRejectedError, match="the amount must be positive, got -5"):
        await runner.update(handle, "approve", -5)
    assert await runner.update(handle.id, "approve", 250, update_id="r-1") == {"approved": 100}
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    # The same update id again: the same reply; a new one finds the workflow ended.
    assert await runner.update(handle, "approve", 250, update_id="r-1") == {"approved": 100}
    with pytest.raises(UpdateNotHandledError):
        await runner.update(handle, "approve", 7)


@workflow
async def publishes() -> str:
    await sleep(60)
    await set_event("ready", (await now()).year > 2000)
    await sleep(86400)
    return "done"


async def test_the_runner_runs_a_workflow_while_a_caller_waits_for_its_event(
    sqlite_store: SQLiteStore,
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(publishes)
    runner = WorkflowRunner(sqlite_store)
    assert await runner.run_during(handle, handle.get_event("ready", timeout=600)) is True
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert runner.clock.offset.total_seconds() > 86400  # the sleeps were skipped


STEP_STARTED: list[anyio.Event] = []


@workflow_step
async def slow_step() -> str:
    STEP_STARTED[0].set()
    await anyio.sleep(0.2)
    return "done"


@workflow
async def slow() -> str:
    return await slow_step()


async def test_a_call_that_ends_mid_attempt_does_not_cut_the_attempt_short(
    sqlite_store: SQLiteStore,
) -> None:
    STEP_STARTED[:] = [anyio.Event()]
    handle = await DurableClient(sqlite_store).start_workflow(slow)
    runner = WorkflowRunner(sqlite_store)
    await runner.run_during(handle, STEP_STARTED[0].wait())  # done while the step runs
    assert await handle.status() is WorkflowStatus.SUCCEEDED  # the attempt ran to its end
