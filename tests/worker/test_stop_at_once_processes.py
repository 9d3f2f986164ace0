"""A second SIGTERM stops a real worker process at once, whatever it has in flight (issue 34).

Each test holds the worker where the first SIGTERM's drain cannot end: a group-commit
flush waiting on a row lock the test holds (pipelined, sent from a writer's own task in a
shielded scope), a saga's compensation blocked in the shielded scope it runs in (also
under a ``--processes`` supervisor), a step in a shielded scope of its own (only the
process's hard exit ends it), or, under a supervisor, a step that blocks its process's
event loop (the supervisor kills it). The second SIGTERM must end the process while it
is held (the hang guard is a minute, and without the fix it never ends while held); a
second worker then completes the held workflows. How long the exit took is printed
(``pytest -s``), not bounded.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import anyio
import asyncpg

from durable_core import DurableClient, WorkflowStatus
from durable_core.codec.failures import load_error
from durable_core.runtime.stopping import ABANDON_GRACE_SECS
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.apps import saga
from tests.worker.conftest import Workers, eventually, plain

LEASE = 2
HANG_GUARD = 60
SAGA_APP = "tests.worker.apps.saga"


async def signalled_twice(
    workers: Workers, proc: subprocess.Popen[bytes], *, heard: str = "received SIGTERM"
) -> int:
    """SIGTERM ``proc``, and once its log says it ``heard`` it, SIGTERM it again; its exit
    code, once it has exited (failing if it still runs :data:`HANG_GUARD` seconds later)."""
    proc.send_signal(signal.SIGTERM)

    async def draining() -> bool:
        return heard in workers.log(proc)

    await eventually(draining, timeout=HANG_GUARD, what="the first SIGTERM to be heard")
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    try:
        code = await anyio.to_thread.run_sync(proc.wait, HANG_GUARD)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"still running {HANG_GUARD}s after the second SIGTERM:\n{workers.log(proc)[-3000:]}"
        ) from None
    print(f"exited {time.monotonic() - sent:.3f}s after the second SIGTERM")
    return code


async def test_a_second_sigterm_stops_a_worker_whose_flushes_wait_on_a_row_lock(
    pg: PostgresStore,
    workers: Workers,
    sql: asyncpg.Connection,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    flag = tmp_path / "settle"
    handles = await DurableClient(pg).start_workflows(app.settles_when_told, [(str(flag),)] * 4)
    ids = [handle.id for handle in handles]
    # Concurrency 100 pipelines two flushes; with a minimum batch of one, a settlement is
    # sent at once from the task of the workflow settling, shielded.
    proc = workers.start(
        WORKFLOW_CONCURRENCY=100, WORKFLOW_FLUSH_MIN_BATCH=1, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE
    )

    async def first_steps_committed() -> bool:
        steps = "SELECT count(*) FROM workflow_steps WHERE workflow_id = ANY($1::text[])"
        return bool(await sql.fetchval(steps, ids) == len(ids))

    await eventually(first_steps_committed, timeout=120, what="the four first steps to commit")
    locker = await asyncpg.connect(plain(postgres_url))
    holding = locker.transaction()
    await holding.start()
    try:
        await locker.execute("SELECT 1 FROM workflows WHERE id = ANY($1::text[]) FOR UPDATE", ids)
        flag.touch()

        async def both_flushes_wait() -> bool:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE 'WITH %unnest(%'"
            )
            return bool(await sql.fetchval(waiting) == 2)

        await eventually(both_flushes_wait, timeout=120, what="two flushes to wait on the lock")
        assert await signalled_twice(workers, proc) == 1
    finally:
        await holding.rollback()
        await locker.close()
    log = workers.log(proc)
    assert "received SIGTERM again: abandoning 4 in-flight workflows" in log, log[-3000:]
    assert await sql.fetchval(
        "SELECT count(*) FROM workflows WHERE status = 'running' AND attempts = 1"
    ) == len(ids), "left to their leases"

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    for handle in handles:
        assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
        assert await handle.output() == "settled"
        assert (await handle.info()).attempts == 2, "reclaimed by the second worker"


async def test_a_second_sigterm_ends_a_process_whose_step_no_cancellation_reaches(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.shielded_step)
    proc = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)

    async def shielded() -> bool:
        runs = "SELECT count(*) FROM step_runs WHERE step = 'shielded'"
        return bool(await sql.fetchval(runs))

    await eventually(shielded, timeout=120, what="the step to shield itself")
    assert await signalled_twice(workers, proc) == 1
    log = workers.log(proc)
    hard_exit = f"received SIGTERM again {ABANDON_GRACE_SECS:.1f}s ago and the process still runs"
    assert f"{hard_exit}: exiting now" in log

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    assert (await handle.info()).attempts == 2, "reclaimed by the second worker"


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def compensation_held(log: Path) -> None:
    async def holding() -> bool:
        return "undo hotel begins" in lines(log)

    await eventually(holding, timeout=120, what="the hotel's compensation to begin")


def completed_compensations(log: Path) -> list[str]:
    """What the second worker's run of the saga appended, after the first was stopped in
    the hotel's compensation."""
    before = ["book car", "book hotel", "book flight", "pay", "undo flight begins"]
    ran = lines(log)
    assert ran[:7] == [*before, "undo flight", "undo hotel begins"]
    return ran[7:]


async def test_a_second_sigterm_stops_a_worker_in_the_middle_of_a_compensation(
    pg: PostgresStore, workers: Workers, tmp_path: Path
) -> None:
    log, release = tmp_path / "saga.log", tmp_path / "release"
    handle = await DurableClient(pg).start_workflow(saga.trip, True)
    held: dict[str, str | float] = {
        "SAGA_HOLD": 1,
        "SAGA_LOG": str(log),
        "SAGA_RELEASE": str(release),
    }
    proc = workers.start(app=SAGA_APP, **held, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    await compensation_held(log)
    try:
        assert await signalled_twice(workers, proc) == 1
        assert lines(log)[-1] == "undo hotel begins", "stopped inside the compensation"
    finally:
        release.touch()
    assert "received SIGTERM again: abandoning 1 in-flight workflows" in workers.log(proc)

    workers.start(app=SAGA_APP, **held, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    assert await handle.wait_with_timeout(120) is WorkflowStatus.FAILED
    assert completed_compensations(log) == [
        "undo hotel begins",  # the second worker: the flight's is recorded, the hotel's not
        "undo hotel",
        "undo car begins",
        "undo car",
    ]
    error = load_error((await handle.info()).error)
    assert error is not None and error["details"]["compensations"] == [saga.cancel_booking.name] * 3


async def test_a_second_sigterm_to_the_supervisor_stops_its_processes_at_once(
    pg: PostgresStore, workers: Workers, tmp_path: Path
) -> None:
    log, release = tmp_path / "saga.log", tmp_path / "release"
    handle = await DurableClient(pg).start_workflow(saga.trip, True)
    held: dict[str, str | float] = {
        "SAGA_HOLD": 1,
        "SAGA_LOG": str(log),
        "SAGA_RELEASE": str(release),
    }
    supervisor = workers.start(
        "--processes", "2", app=SAGA_APP, **held, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE
    )
    await compensation_held(log)
    try:
        code = await signalled_twice(workers, supervisor, heard="received SIGTERM: draining")
        assert code == 1, "a process abandoned its workflow"
        assert lines(log)[-1] == "undo hotel begins", "stopped inside the compensation"
    finally:
        release.touch()
    said = workers.log(supervisor)
    assert "received SIGTERM again: stopping the workers at once" in said
    assert "the supervisor was asked to stop at once: abandoning 1 in-flight workflows" in said

    workers.start(app=SAGA_APP, **held, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    assert await handle.wait_with_timeout(120) is WorkflowStatus.FAILED
    assert completed_compensations(log)[-2:] == ["undo car begins", "undo car"]


async def test_a_second_sigterm_to_the_supervisor_kills_a_process_whose_loop_is_blocked(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.loop_blocked)
    supervisor = workers.start("--processes", "2", WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)

    async def blocking() -> bool:
        runs = "SELECT count(*) FROM step_runs WHERE step = 'blocking'"
        return bool(await sql.fetchval(runs))

    await eventually(blocking, timeout=120, what="a worker process to block its loop")
    code = await signalled_twice(workers, supervisor, heard="received SIGTERM: draining")
    assert code == 1
    said = workers.log(supervisor)
    assert "s after it was told to stop at once: killing it" in said
    assert "was killed by SIGKILL" in said

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE)
    assert await handle.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    assert (await handle.info()).attempts == 2, "reclaimed by the next worker"
