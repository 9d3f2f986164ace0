"""A saga for the crash test of issue 22's compensation (tests/worker/test_saga_processes.py).

Each step appends what it did to the file ``SAGA_LOG``. In a worker started with
``SAGA_HOLD=1`` the hotel's compensation blocks once it has begun, so the test can
SIGKILL the worker in the middle of compensating (with ``SAGA_RELEASE``, only until that
file exists); a worker without it runs straight through.
"""

from __future__ import annotations

import os

import anyio

from durable_core import saga, workflow, workflow_step


def log(line: str) -> None:
    """Append ``line`` to the test's log file (one line, flushed as it closes)."""
    with open(os.environ["SAGA_LOG"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@workflow_step
async def book(what: str) -> str:
    log(f"book {what}")
    return what


@workflow_step
async def cancel_booking(what: str) -> None:
    log(f"undo {what} begins")
    if what == "hotel" and os.environ.get("SAGA_HOLD"):
        await held()
    log(f"undo {what}")


async def held() -> None:
    """Until the file ``SAGA_RELEASE`` exists (without it, an hour)."""
    release = os.environ.get("SAGA_RELEASE")
    if release is None:
        await anyio.sleep(3600)
        return
    while not os.path.exists(release):  # noqa: ASYNC110 -- another process makes the file
        await anyio.sleep(0.05)


@workflow_step
async def pay(fail: bool) -> str:
    """Fails (declined), or blocks until the workflow is cancelled."""
    log("pay")
    if fail:
        raise ValueError("card declined")
    await anyio.sleep(3600)
    return "paid"


@workflow(name="saga_processes.trip", max_attempts=3)
async def trip(fail: bool) -> str:
    async with saga() as s:
        for what in ("car", "hotel", "flight"):
            await s.compensate(cancel_booking, await book(what))
        return await pay(fail)
