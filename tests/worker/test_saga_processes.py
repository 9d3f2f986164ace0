"""A saga's compensations across a SIGKILL of the worker running them (issue 22).

Real ``durable worker`` processes on PostgreSQL (tests/worker/apps/saga.py). The block
fails (a declined payment) or its workflow is cancelled while it runs (heard through
``NOTIFY``; the cancel is a request, as the workflow owes compensations); the worker
compensates and, started with ``SAGA_HOLD=1``, blocks in the hotel's compensation, where
it is killed. A second worker resumes: the flight's compensation, done, is not run
again; the hotel's runs again (at least once) and the car's runs; the workflow ends
failed or cancelled with an error naming the three.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from durable_core import DurableClient, WorkflowStatus
from durable_core.codec.failures import load_error
from durable_postgres import PostgresStore
from tests.worker.apps import saga
from tests.worker.conftest import Workers, eventually

LEASE = 2
APP = "tests.worker.apps.saga"


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("ending", ["failed", "cancelled"])
async def test_a_sigkill_in_the_middle_of_compensating_runs_each_once_in_reverse_order(
    ending: str, pg: PostgresStore, workers: Workers, tmp_path: Path
) -> None:
    log = tmp_path / "saga.log"
    handle = await DurableClient(pg).start_workflow(saga.trip, ending == "failed")
    victim = workers.start(
        app=APP, SAGA_HOLD=1, SAGA_LOG=str(log), WORKFLOW_LOCK_TIMEOUT_SECS=LEASE
    )
    if ending == "cancelled":

        async def paying() -> bool:
            return "pay" in lines(log)

        await eventually(paying, timeout=60, what="the body to reach its payment")
        steps = [s.step_name for s in await handle.steps()]
        assert steps.count("durable.compensate") == 3, "registered before the payment"
        await handle.cancel()
        assert await handle.status() is WorkflowStatus.RUNNING, "a request: it compensates"

    async def holding() -> bool:
        return "undo hotel begins" in lines(log)

    await eventually(holding, timeout=60, what="the hotel's compensation to begin")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=120)
    assert lines(log)[-2:] == ["undo flight", "undo hotel begins"]

    workers.start(app=APP, SAGA_LOG=str(log), WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    status = await handle.wait_with_timeout(60)
    assert status.value == ending, await handle.error()
    assert lines(log) == [
        "book car",
        "book hotel",
        "book flight",
        "pay",
        "undo flight begins",
        "undo flight",
        "undo hotel begins",  # killed here
        "undo hotel begins",  # the next worker: flight's is recorded, hotel's runs again
        "undo hotel",
        "undo car begins",
        "undo car",
    ]
    error = load_error((await handle.info()).error)
    assert error is not None
    name = saga.cancel_booking.name
    assert error["details"]["compensations"] == [name] * 3
    if ending == "failed":
        assert error["details"]["original"]["message"] == "card declined"
    else:
        assert "was cancelled; compensations ran" in error["message"]
    outcomes = [a.outcome for a in await handle.attempts()]
    assert outcomes == ["crashed", ending]
