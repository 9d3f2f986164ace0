"""Worker processes (framework, floors, peers): start, wait until ready, read RSS and CPU, stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import asyncpg

from bench.common import DEV_PLUGINS, RESULTS_DIR, ROOT

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a supervisor's worker processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@dataclass
class Proc:
    """One worker process and where its output goes."""

    kind: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu_seconds(self) -> float:
        """User + system CPU time the process has used so far."""
        return cpu_seconds(self.pid)

    def rss_kib(self, key: str = "VmRSS") -> int:
        """A memory line of ``/proc/PID/status`` in KiB (``VmRSS`` now, ``VmHWM`` peak)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"no {key} for process {self.pid}")

    async def wait_for_line(self, text: str, timeout: float = 60.0) -> None:
        """Wait until the process has printed a line ``text``."""
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text(errors="replace").splitlines():
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.kind} worker {self.pid} did not print {text!r}")
            await anyio.sleep(0.05)

    def check_alive(self) -> None:
        code = self.popen.poll()
        if code is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.kind} worker {self.pid} exited with {code}:\n{tail}")


@dataclass
class Fleet:
    """Processes started for one measurement; all are stopped when it ends."""

    url: str
    procs: list[Proc] = field(default_factory=list)

    def start_worker(
        self,
        *,
        concurrency: int,
        poll_ms: int = 1000,
        url: str | None = None,
        uvloop: bool = False,
        processes: int = 1,
    ) -> Proc:
        """A real ``python -m durable_core worker --app bench.app`` process (with
        ``uvloop``: the same command on uvloop's event loop, :mod:`bench.uvloop_run`; with
        ``processes`` above 1: its supervisor, ``--processes N``)."""
        env = {
            "WORKFLOW_CONCURRENCY": str(concurrency),
            "WORKFLOW_POLL_INTERVAL_MS": str(poll_ms),
        }
        command = [
            sys.executable,
            "-m",
            "bench.uvloop_run" if uvloop else "durable_core",
            "worker",
            "--app",
            "bench.app",
            "--database-url",
            url or self.url,
            *(["--processes", str(processes)] if processes > 1 else []),
        ]
        return self._start("framework", command, env)

    def start_floor(
        self,
        *,
        concurrency: int,
        steps: int = 3,
        sleep: float = 0.0,
        poll_ms: int = 1000,
        listen: bool = True,
    ) -> Proc:
        """A ``python -m bench.floor`` process: the same round trips, bare asyncpg."""
        command = [
            sys.executable,
            "-m",
            "bench.floor",
            "--url",
            self.url,
            "--concurrency",
            str(concurrency),
            "--steps",
            str(steps),
            "--sleep",
            str(sleep),
            "--poll-ms",
            str(poll_ms),
        ]
        if not listen:
            command.append("--no-listen")
        return self._start("floor", command, {})

    def start_own_floor(
        self, kind: str, *, concurrency: int, steps: int = 3, poll_ms: int = 1000
    ) -> Proc:
        """A ``python -m bench.naive_floor`` (``kind`` "naive") or ``bench.group_floor``
        ("group") process: the same rows written by a plain design, bare asyncpg."""
        module = {
            "naive": "bench.naive_floor",
            "group": "bench.group_floor",
            "ceiling": "bench.ceiling_floor",
        }[kind]
        command = [
            sys.executable,
            "-m",
            module,
            "--url",
            self.url,
            "--concurrency",
            str(concurrency),
            "--steps",
            str(steps),
            "--poll-ms",
            str(poll_ms),
        ]
        return self._start(kind, command, {})

    def start_dbos(self, url: str, *, concurrency: int, poll_ms: int) -> Proc:
        """A ``python -m bench.dbos_peer`` process: DBOS serving its queue on ``url``."""
        command = [
            sys.executable,
            "-m",
            "bench.dbos_peer",
            "--url",
            url,
            "--concurrency",
            str(concurrency),
            "--poll-ms",
            str(poll_ms),
        ]
        return self._start("dbos", command, {})

    def _start(self, kind: str, command: list[str], env: dict[str, str]) -> Proc:
        logs = RESULTS_DIR / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{kind}-{len(self.procs)}.log"
        environment = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DURABLE_LOG_LEVEL": os.environ.get("DURABLE_LOG_LEVEL", "INFO"),
            "DURABLE_BLOCK_PLUGINS": DEV_PLUGINS,
            **env,
        }
        environment.pop("DURABLE_DATABASE_URL", None)
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                command, cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT
            )
        proc = Proc(kind, popen, log)
        self.procs.append(proc)
        return proc

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every process (graceful), then SIGKILL what is left after ``timeout``."""
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=10)
        self.procs.clear()


@contextlib.contextmanager
def fleet(url: str) -> Iterator[Fleet]:
    """A :class:`Fleet` whose processes never outlive the block."""
    group = Fleet(url)
    try:
        yield group
    finally:
        group.stop()


async def worker_backends(conn: asyncpg.Connection) -> set[int]:
    """The server processes of this database's sessions named ``durable*`` (workers, the
    floor, and any ``PostgresStore`` of the bench itself)."""
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name LIKE 'durable%' AND pid <> pg_backend_pid()"
    )
    return {row["pid"] for row in rows}


async def server_cpu(conn: asyncpg.Connection, exclude: set[int]) -> dict[int, float]:
    """CPU seconds used so far by each server process of :func:`worker_backends` but
    ``exclude``; empty when ``/proc`` does not show them (the server runs elsewhere)."""
    used = {}
    for pid in await worker_backends(conn) - exclude:
        try:
            used[pid] = cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            continue
    return used


async def listeners(conn: asyncpg.Connection) -> int:
    """How many sessions on this database are idle in ``LISTEN`` (workers waiting for work)."""
    count: int = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()"
    )
    return count


async def wait_listening(
    conn: asyncpg.Connection, procs: list[Proc], expected: int, timeout: float = 60.0
) -> None:
    """Wait until ``expected`` sessions listen (every process is up and idle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            proc.check_alive()
        if await listeners(conn) >= expected:
            return
        await anyio.sleep(0.05)
    raise TimeoutError(f"workers did not start listening within {timeout}s")


async def wait_settled(
    conn: asyncpg.Connection,
    procs: list[Proc],
    count: int,
    timeout: float,
    status: str = "succeeded",
) -> None:
    """Wait until ``count`` rows have ``status``; fail if a worker dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        done = await conn.fetchval("SELECT count(*) FROM workflows WHERE status = $1", status)
        if done >= count:
            return
        for proc in procs:
            proc.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {done} of {count} workflows are {status} after {timeout}s")
        await anyio.sleep(0.05)
