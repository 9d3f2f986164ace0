"""The tasks a worker runs its workflows in (``runtime/flight.py``): plain asyncio tasks
that keep anyio's cancellation."""

from __future__ import annotations

import anyio
import pytest

from durable_core import (
    DurableClient,
    WorkflowConfig,
    WorkflowStatus,
    cleanup,
    workflow,
    workflow_step,
)
from durable_core.runtime.flight import InFlight
from durable_core.runtime.worker import WorkflowWorker
from durable_postgres import PostgresStore

began = anyio.Event()
cleaned: list[str] = []


@workflow_step
async def forever(tag: str) -> str:
    began.set()
    try:
        await anyio.sleep_forever()
    finally:
        with cleanup():
            await anyio.sleep(0.01)  # a shielded clean-up that awaits
            cleaned.append(tag)
    return tag


@workflow
async def never_ends(tag: str) -> str:
    return await forever(tag)


async def test_the_drain_timeout_cancels_bodies_the_anyio_way_and_settles_nothing(
    pg: PostgresStore,
) -> None:
    """Abandoned workflows are cancelled through their cancel scopes: a body's shielded
    clean-up runs, and the executor tells the worker's cancellation from the body's own,
    so the row is left running for its lease to expire (a plain task.cancel() would have
    settled it as a failed attempt)."""
    global began
    began = anyio.Event()
    cleaned.clear()
    handle = await DurableClient(pg).start_workflow(never_ends, "abandoned")
    worker = WorkflowWorker(
        pg, WorkflowConfig(concurrency=2, poll_interval_ms=50, drain_timeout_secs=0)
    )
    with anyio.fail_after(120):  # a worker that cannot abandon its work hangs: fail instead
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await began.wait()
            worker.stop()
    assert worker.abandoned
    assert cleaned == ["abandoned"], "the shielded clean-up ran under the cancellation"
    info = await handle.info()
    assert info.status is WorkflowStatus.RUNNING, "left to its lease, not settled"
    assert info.attempts == 1


class Bug(BaseException):
    """Not an Exception: a task lets it escape."""


async def test_an_error_a_task_lets_escape_is_told_and_raised_once_all_have_ended() -> None:
    told: list[BaseException] = []
    ended: list[str] = []
    flight = InFlight(told.append)

    async def fails(delay: float) -> None:
        await anyio.sleep(delay)
        raise Bug("escaped")

    async def finishes(delay: float) -> None:
        await anyio.sleep(delay)
        ended.append("finished")

    flight.start(fails, 0.0)
    flight.start(finishes, 0.05)
    with pytest.raises(Bug, match="escaped"):
        await flight.wait()
    assert [type(error) for error in told] == [Bug]
    assert ended == ["finished"], "the others ran to their end first"
    assert len(flight) == 0


async def test_waiting_cancelled_cancels_every_task_and_waits_for_it() -> None:
    flight = InFlight(lambda error: None)
    cancelled: list[int] = []

    async def sleeps(n: int) -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)
            cancelled.append(n)
            raise

    for n in range(3):
        flight.start(sleeps, n)
    with anyio.move_on_after(0.05):
        await flight.wait()
    assert sorted(cancelled) == [0, 1, 2], "each was cancelled and awaited before wait ended"
    assert len(flight) == 0


async def test_a_task_cancelled_before_it_first_ran_is_cancelled_too() -> None:
    ran: list[str] = []

    async def sleeps(tag: str) -> None:
        ran.append(tag)
        await anyio.sleep_forever()

    flight = InFlight(lambda error: None)
    flight.start(sleeps, "late")  # not run yet: the loop has not turned
    flight.cancel()
    with anyio.fail_after(120):  # a task the cancel missed would sleep forever: fail instead
        await flight.wait()
    assert ran == ["late"] and len(flight) == 0
