"""Debounce across processes and a SIGKILL; keyed limits with real workers (issue 22).

Starter processes (``python -m tests.worker.apps.flow``) debounce one key against
PostgreSQL while no worker runs, so the window cannot close under them; a worker
started afterwards runs what they left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import asyncpg

from durable_core import DebounceKey, DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker.apps import flow
from tests.worker.conftest import ROOT, Workers, eventually

APP = "tests.worker.apps.flow"


def starter(url: str, key: str, first: int, count: int, log: Path) -> subprocess.Popen[str]:
    """A process debouncing ``flow.debounced`` under ``key`` (see the app's docstring)."""
    env = {**os.environ, "DURABLE_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", APP, key, str(first), str(count)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def committed(out: str) -> list[tuple[str, int]]:
    """The ``(run id, argument)`` lines a starter printed (whole lines only)."""
    lines = out.split("\n")[:-1]  # a line cut by a SIGKILL has no newline
    return [(run, int(n)) for run, n in (line.split() for line in lines)]


async def runs_of(sql: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(
        await sql.fetch(
            "SELECT id, status, attempts, output, input FROM workflows WHERE name = $1",
            flow.debounced.name,
        )
    )


async def test_debounced_starts_from_processes_one_killed_make_one_run_per_key(
    pg: PostgresStore,
    workers: Workers,
    sql: asyncpg.Connection,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    # Two processes debounce "user-1" at once; a third debounces "user-2" until SIGKILLed.
    first = starter(postgres_url, "user-1", 0, 10, tmp_path / "a.log")
    second = starter(postgres_url, "user-1", 100, 10, tmp_path / "b.log")
    victim = starter(postgres_url, "user-2", 0, 0, tmp_path / "victim.log")
    assert victim.stdout is not None
    seen: list[str] = []
    while len(seen) < 10:  # ten starts committed, then killed wherever it is
        line = await anyio.to_thread.run_sync(victim.stdout.readline)
        assert line, "the starter exited: " + (tmp_path / "victim.log").read_text()
        seen.append(line)
    victim.send_signal(signal.SIGKILL)
    killed = committed("".join(seen) + victim.communicate(timeout=120)[0])
    outs = [proc.communicate(timeout=120)[0] for proc in (first, second)]
    assert [proc.returncode for proc in (first, second)] == [0, 0], outs
    lines = committed(outs[0]) + committed(outs[1])
    assert len(lines) == 20
    [run] = {run for run, _ in lines}  # every start of both processes got the one run
    [cut] = {run for run, _ in killed}
    # The last start (this process, after both) gives the run its arguments.
    last = await DurableClient(pg).start_workflow_debounced(
        DebounceKey("user-1", flow.WINDOW), flow.debounced, 999
    )
    assert last.id == run

    workers.start(app=APP)
    assert await last.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert await last.output() == 999
    survivor = DurableClient(pg).handle(cut)
    assert await survivor.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    # Its argument is the last start that committed: the one printed last, or the one
    # the kill cut between its commit and its print.
    assert await survivor.output() in (killed[-1][1], killed[-1][1] + 1)
    rows = await runs_of(sql)
    assert sorted((row["id"], row["attempts"]) for row in rows) == sorted([(run, 1), (cut, 1)])


async def test_a_hot_key_with_fifty_workflows_does_not_delay_a_cold_keys_one(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    hot = client.with_options(concurrency_key="hot")
    await hot.start_workflows(flow.keyed, [(0.2,)] * 50)  # one at a time: 10 s in all
    workers.start(app=APP, WORKFLOW_CONCURRENCY=4)

    async def hot_running() -> bool:
        return bool(
            await sql.fetchval(
                "SELECT count(*) FROM workflows WHERE concurrency_key = 'hot' "
                "AND status = 'running'"
            )
        )

    await eventually(hot_running, timeout=60, what="the hot key to run")
    cold = await client.with_options(concurrency_key="cold").start_workflow(flow.keyed, 0.0)
    assert await cold.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    done = await sql.fetchval(
        "SELECT count(*) FROM workflows WHERE concurrency_key = 'hot' AND status = 'succeeded'"
    )
    # The cold key was served beside the hot one, not after its backlog (a claim that
    # looked only at the lane's first rows, all hot, found no cold row until the end).
    assert done < 40, f"{done} hot workflows ended before the cold one"
    most = await sql.fetchval(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM workflows WHERE concurrency_key = 'hot'"
        " AND status = 'running') AS running"
    )
    assert most <= 1, "the hot key keeps its limit"
