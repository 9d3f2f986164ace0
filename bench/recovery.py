"""``python -m bench.recovery``: how long a SIGKILLed worker's workflow waits for another worker.

Each run: worker A claims a workflow whose step, on its first attempt, sleeps far longer
than the run; once the step has begun, a second worker B starts; after a random pause
(somewhere in A's lease renewal cycle, as a crash would fall) A is SIGKILLed. The figure
is the time from the kill to the moment the held workflow's step runs again, on B, both
read off the database server's clock. Reported: the median of the runs, and each run.

The workers run with the defaults (``WORKFLOW_LOCK_TIMEOUT_SECS`` 30,
``WORKFLOW_POLL_INTERVAL_MS`` 1000) unless ``--lease`` or ``--poll-ms`` say otherwise.
The script uses only what every release has (worker processes, ``start_workflow``), so
the same file measures an older checkout when run from it (its ``bench/`` and packages
first on the path)::

    python -m bench.recovery --runs 5 --url postgresql://postgres@127.0.0.1:5432/durable_recovery

The workers run the workflow of :mod:`bench.recovery_app`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import anyio
import asyncpg

from bench.common import DEV_PLUGINS, RESULTS_DIR, ROOT, ensure_database, plain_dsn, reset
from bench.recovery_app import MARKS_DDL, held
from durable_core import DurableClient
from durable_postgres import PostgresStore


class Worker:
    """A ``durable worker --app bench.recovery_app`` process."""

    def __init__(self, url: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        environment = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DURABLE_DATABASE_URL": url,
            "DURABLE_BLOCK_PLUGINS": DEV_PLUGINS,
            "WORKFLOW_CONCURRENCY": "1",
            **env,
        }
        with open(log, "wb") as out:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "durable_core",
                    "worker",
                    "--app",
                    "bench.recovery_app",
                    "--bootstrap",
                    "bench.recovery_app:bootstrap",
                ],
                cwd=ROOT,
                env=environment,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def started(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "started: concurrency" not in self.log.read_text(errors="replace"):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{self.log.read_text()[-3000:]}")
            await anyio.sleep(0.05)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)


async def mark(conn: asyncpg.Connection, workflow_id: str, attempt: int, guard: float) -> datetime:
    """When ``workflow_id``'s step began in ``attempt`` (waiting for it at most ``guard`` s)."""
    deadline = time.monotonic() + guard
    while time.monotonic() < deadline:
        at: datetime | None = await conn.fetchval(
            "SELECT min(at) FROM recovery_marks WHERE workflow_id = $1 AND attempt = $2",
            workflow_id,
            attempt,
        )
        if at is not None:
            return at
        await anyio.sleep(0.01)
    raise TimeoutError(f"attempt {attempt} of {workflow_id} did not begin within {guard}s")


async def one_run(url: str, env: dict[str, str], lease: float, logs: Path, n: int) -> float:
    """Seconds from the SIGKILL of the holding worker to the held step's next run."""
    conn = await asyncpg.connect(plain_dsn(url))
    victim = rescuer = None
    try:
        await reset(conn)
        await conn.execute("TRUNCATE recovery_marks")
        victim = Worker(url, env, logs / f"victim-{n}.log")
        await victim.started()
        async with PostgresStore(url) as store:
            handle = await DurableClient(store).start_workflow(held, 3600.0)
        await mark(conn, handle.id, 1, 60)
        rescuer = Worker(url, env, logs / f"rescuer-{n}.log")
        await rescuer.started()
        await anyio.sleep(random.uniform(0, lease / 2))  # where in the lease the crash falls
        killed_at: datetime = await conn.fetchval("SELECT clock_timestamp()")
        victim.popen.send_signal(signal.SIGKILL)
        victim.popen.wait(timeout=30)
        again = await mark(conn, handle.id, 2, 2 * lease + 120)
        return (again - killed_at).total_seconds()
    finally:
        for proc in (victim, rescuer):
            if proc is not None:
                proc.stop()
        await conn.close()


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__)
    parser.add_argument(
        "--url",
        default=os.environ.get(
            "DURABLE_BENCH_URL", "postgresql://postgres@127.0.0.1:5432/durable_recovery"
        ),
        help="PostgreSQL URL of a database the bench may empty",
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lease", type=float, default=30.0, help="WORKFLOW_LOCK_TIMEOUT_SECS")
    parser.add_argument("--poll-ms", type=int, default=1000, help="WORKFLOW_POLL_INTERVAL_MS")
    args = parser.parse_args(argv)
    await ensure_database(args.url)
    async with PostgresStore(args.url) as store:
        await store.apply_schema()
    conn = await asyncpg.connect(plain_dsn(args.url))
    try:
        await conn.execute(MARKS_DDL)
    finally:
        await conn.close()
    env = {
        "WORKFLOW_LOCK_TIMEOUT_SECS": str(int(args.lease)),
        "WORKFLOW_POLL_INTERVAL_MS": str(args.poll_ms),
    }
    logs = RESULTS_DIR / "logs" / "recovery"
    logs.mkdir(parents=True, exist_ok=True)
    seconds = []
    for n in range(args.runs):
        taken = await one_run(args.url, env, args.lease, logs, n)
        print(f"run {n + 1}: the held step ran again {taken:.2f}s after the SIGKILL", flush=True)
        seconds.append(taken)
    result = {
        "command": " ".join(["python -m bench.recovery", *(argv or sys.argv[1:])]),
        "lease_seconds": args.lease,
        "poll_ms": args.poll_ms,
        "seconds": seconds,
        "median_seconds": statistics.median(seconds),
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "recovery.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"median {result['median_seconds']:.2f}s from SIGKILL to the held step's next run "
        f"({args.runs} runs; lease {args.lease:g}s, poll {args.poll_ms} ms)"
    )


if __name__ == "__main__":
    anyio.run(main)
