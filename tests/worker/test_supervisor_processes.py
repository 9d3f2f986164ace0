"""``durable worker --processes N``: a supervisor of real worker processes on PostgreSQL.

The supervisor logs ``worker process I started (pid P)`` each time one of its processes
claims; the tests wait on those lines, and on what the database holds.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import asyncpg
import pytest

from durable_core import DurableClient, WorkflowStatus
from durable_core.cli.supervisor import child_command, cores, process_count
from durable_core.errors import ConfigurationError
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import ROOT, Workers, eventually

STARTED = re.compile(r"worker process (\d+) started \(pid (\d+)\)")


async def started(workers: Workers, supervisor: subprocess.Popen[bytes], count: int) -> list[int]:
    """The pids of the first ``count`` starts the supervisor logged, in order."""

    async def logged() -> bool:
        assert supervisor.poll() is None, workers.log(supervisor)
        return len(STARTED.findall(workers.log(supervisor))) >= count

    await eventually(logged, timeout=120, what=f"{count} worker processes to start")
    return [int(pid) for _, pid in STARTED.findall(workers.log(supervisor))[:count]]


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (absent, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def pid_of(worker_id: str) -> int:
    return int(worker_id.split(":")[1])


async def test_processes_share_the_work_a_killed_one_is_restarted_and_sigterm_drains_all(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    supervisor = workers.start(
        "--processes", "2", WORKFLOW_CONCURRENCY=2, WORKFLOW_LOCK_TIMEOUT_SECS=2
    )
    pids = await started(workers, supervisor, 2)
    try:
        handles = await client.start_workflows(app.three_steps, [(n,) for n in range(40)])
        for handle in handles:
            assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
        used = await sql.fetch("SELECT DISTINCT worker FROM step_runs")
        assert {pid_of(row["worker"]) for row in used} == set(pids), "both claimed work"
        assert await sql.fetchval("SELECT count(*) FROM step_runs") == 120

        # SIGKILL the process in the middle of a step: it is started again, and the
        # workflow is reclaimed once its lease expires.
        hung = await client.start_workflow(app.killed_mid_step, 10)

        async def hanging() -> bool:
            return bool(await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = 'hang'"))

        await eventually(hanging, timeout=60, what="a worker process to enter the hanging step")
        victim = pid_of(await sql.fetchval("SELECT worker FROM step_runs WHERE step = 'hang'"))
        os.kill(victim, signal.SIGKILL)
        pids += (await started(workers, supervisor, 3))[2:]
        assert victim not in pids[2:], "a new process took the killed one's place"
        assert f"(pid {victim}) was killed by SIGKILL; starting it again in 0.5s" in (
            workers.log(supervisor)
        )
        assert await hung.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
        assert (await hung.info()).attempts == 2

        # SIGTERM: every process stops claiming and finishes its in-flight workflows.
        in_flight = await client.start_workflows(app.slow_flow, [(0.5,)] * 4)

        async def all_running() -> bool:
            count = "SELECT count(*) FROM workflows WHERE status = 'running'"
            return bool(await sql.fetchval(count) == 4)

        await eventually(all_running, timeout=60, what="four workflows running")
        supervisor.send_signal(signal.SIGTERM)

        async def draining() -> bool:
            return workers.log(supervisor).count("stopping: waiting for 2 in-flight") == 2

        await eventually(draining, timeout=60, what="both processes to stop claiming")
        late = await client.start_workflows(app.instant, [()] * 2)
        assert supervisor.wait(timeout=60) == 0
        for slow in in_flight:
            assert await slow.status() is WorkflowStatus.SUCCEEDED
        for waiting in late:
            assert await waiting.status() is WorkflowStatus.PENDING
        live = [pid for pid in pids if pid != victim]
        assert all(gone(pid) for pid in live), "no process outlived the supervisor"
        log = workers.log(supervisor)
        assert log.count("exited with code 0") == 2
    finally:
        kill_all(pids)


def _free_pair() -> int:
    """A port P with P + 1 free as well (both checked by binding)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two free ports in a row")


async def test_a_sigkilled_supervisor_leaves_no_worker_process_behind(
    pg: PostgresStore, workers: Workers
) -> None:
    port = _free_pair()
    supervisor = workers.start(
        "--processes", "2", "--metrics-port", str(port), "--metrics-host", "127.0.0.1"
    )
    pids = await started(workers, supervisor, 2)
    try:
        for offset in (0, 1):  # process i serves metrics on the port + i
            url = f"http://127.0.0.1:{port + offset}/metrics"
            with urllib.request.urlopen(url, timeout=30) as response:
                assert "durable_worker_slots" in response.read().decode()
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=120)

        async def all_gone() -> bool:
            return all(gone(pid) for pid in pids)

        await eventually(all_gone, timeout=60, what="the worker processes to exit")
        assert workers.log(supervisor).count("the supervisor is gone") == 2
    finally:
        kill_all(pids)


async def test_a_boot_failure_is_one_line_and_exit_2(postgres_url: str) -> None:
    command = ["worker", "--app", "no_such_app_module", "--processes", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "durable_core", *command],
        env={**os.environ, "DURABLE_DATABASE_URL": postgres_url},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "durable: error: cannot import workflow module 'no_such_app_module': "
        "No module named 'no_such_app_module'"
    ], "said once, by the supervisor, for both processes"


# A stand-in worker process: the first run says it started, then every run exits 3.
BOOTS_ONCE = """
import os, pathlib, socket, sys
marker = pathlib.Path(sys.argv[1])
if not marker.exists():
    marker.write_text("")
    socket.socket(fileno=int(os.environ["DURABLE_SUPERVISOR_FD"])).send(b"started\\n")
sys.exit(3)
"""

SUPERVISE = """
import sys
from durable_core.cli.supervisor import Supervisor
sys.exit(Supervisor([sys.executable, "-c", sys.argv[1], sys.argv[2]], 2).run())
"""


def test_five_failed_boots_in_a_row_stop_the_supervisor(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SUPERVISE, BOOTS_ONCE, str(tmp_path / "booted")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "durable: error: worker processes failed to boot 5 times in a row "
        "(the last exited with code 3)"
    )
    restarts = re.findall(r"starting it again in (\S+)s", result.stderr)
    assert restarts[:3] == ["0.5", "0.5", "1"], "the delay doubles per process"


def test_a_process_that_cannot_be_started_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """No program to run (or no process left to fork): the supervisor says so once, stops
    the processes it started, and exits 2."""
    supervise = SUPERVISE.replace("sys.executable, ", f"{str(tmp_path / 'no-such-python')!r}, ")
    result = subprocess.run(
        [sys.executable, "-c", supervise, "pass", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "durable: error: cannot start worker process 0: No such file or directory"
    ]


def test_processes_option_and_the_command_a_process_runs() -> None:
    assert process_count("auto") == cores() >= 1
    assert process_count("3") == 3
    for bad in ("0", "-1", "many"):
        with pytest.raises(ConfigurationError, match="--processes takes a number from 1"):
            process_count(bad)
    argv = ["--log-level", "INFO", "worker", "--processes", "2", "--app", "x", "--processes=3"]
    assert child_command(argv) == [
        sys.executable,
        "-m",
        "durable_core",
        "--log-level",
        "INFO",
        "worker",
        "--app",
        "x",
    ]
