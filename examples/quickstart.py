"""``make quickstart``: a workflow survives the worker that runs it being killed mid-step.

    python -m examples.quickstart

It says what it will do, then does it: starts the embedded PostgreSQL (data in
``.durable/pgdata``; with ``DURABLE_DATABASE_URL`` set, that database instead), applies
the schema, starts a worker process, starts ``welcome_flow(123)``, SIGKILLs the worker
while the second step runs, starts another worker, and shows that the workflow resumed
at that step, the first step not run again. It exits 1 if anything else happened.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from durable_core import DurableClient, WorkflowHandle, WorkflowStatus, open_store
from durable_core.caller.backends import DATABASE_URL_ENV, database_url_from_env
from durable_core.seams.plugins import plugin_manager
from examples.welcome import LOG_ENV, MAIL_SECONDS, Welcome, welcome_flow

DATA_DIR = Path(".durable") / "pgdata"
LOG = Path(".durable") / "quickstart.log"
LEASE_SECONDS = 5
"""The workers' ``WORKFLOW_LOCK_TIMEOUT_SECS``: how soon a dead worker's lease expires."""
HANG_GUARD = 300
STEPS = ("fetch_user", "send_welcome_email", "record_sent")


def plan(url: str | None) -> list[str]:
    """What the quick start will do, as it tells the user first."""
    if url is None:
        data = DATA_DIR.absolute()
        first = [f"start an embedded PostgreSQL (from the pgserver package), its data in {data}"]
        if os.geteuid() == 0:
            first.append(
                "   You run as root, and PostgreSQL refuses to: pgserver creates a system user "
                f"`pgserver` (useradd), gives it {data}, makes the folders above it readable "
                "and traversable by others (chmod o+rx) and runs the server as that user."
            )
        first.append(f"   (Set {DATABASE_URL_ENV} to use your own PostgreSQL instead.)")
    else:
        first = [f"use the PostgreSQL at {DATABASE_URL_ENV}"]
    return [
        *first,
        "create the durable tables there, as `durable migrate` does",
        "start a worker process: python -m durable_core worker --app examples.welcome",
        "start welcome_flow(123), three steps: fetch_user, send_welcome_email (it takes "
        f"{MAIL_SECONDS:g} s), record_sent",
        "kill the worker with SIGKILL while send_welcome_email runs",
        "start a second worker: once the dead worker's lease expires "
        f"(WORKFLOW_LOCK_TIMEOUT_SECS={LEASE_SECONDS} here) it takes the workflow over",
        "show which worker ran each step, then stop the worker (SIGTERM)",
    ]


def say(text: str) -> None:
    print(text, flush=True)


def log_lines() -> list[dict[str, Any]]:
    if not LOG.exists():
        return []
    return [json.loads(line) for line in LOG.read_text(encoding="utf-8").splitlines() if line]


async def until(done: Callable[[], bool]) -> None:
    """Wait for ``done()`` (a file another process writes: polled)."""
    with anyio.fail_after(HANG_GUARD):
        while not done():  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def start_worker(url: str) -> Process:
    env = {
        **os.environ,
        DATABASE_URL_ENV: url,
        "DURABLE_LOG_LEVEL": "WARNING",
        "WORKFLOW_LOCK_TIMEOUT_SECS": str(LEASE_SECONDS),
        LOG_ENV: str(LOG.absolute()),
    }
    command = [sys.executable, "-m", "durable_core", "worker", "--app", "examples.welcome"]
    return await anyio.open_process(command, env=env, stdout=None, stderr=None)


def story(workers: dict[int, str]) -> tuple[list[str], bool]:
    """Each step's runs, by worker, from the steps' log; and whether it went as promised:
    the first step run once by worker 1, the second started by both and finished by
    worker 2, the third run by worker 2 only."""
    lines = log_lines()
    report = []
    for index, step in enumerate(STEPS):
        runs = [line for line in lines if line["step"] == step]
        parts = []
        for pid in dict.fromkeys(line["pid"] for line in runs):
            events = [line["event"] for line in runs if line["pid"] == pid]
            how = "ran" if "finished" in events else "killed mid-step"
            parts.append(f"{workers.get(pid, 'another process')} (pid {pid}) {how}")
        report.append(f"  step {index} {step:<19} {'; '.join(parts)}")
    first, second = workers
    expected = [
        ("fetch_user", "started", first), ("fetch_user", "finished", first),
        ("send_welcome_email", "started", first),
        ("send_welcome_email", "started", second), ("send_welcome_email", "finished", second),
        ("record_sent", "started", second), ("record_sent", "finished", second),
    ]  # fmt: skip
    happened = [(line["step"], line["event"], line["pid"]) for line in lines]
    return report, happened == expected


async def demo(url: str) -> int:
    store = await open_store(url)
    workers: dict[int, str] = {}
    worker: Process | None = None
    try:
        await store.apply_schema()
        say("[2] the durable tables are there")
        LOG.parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has no .durable/
        LOG.unlink(missing_ok=True)
        worker = await start_worker(url)
        workers[worker.pid] = "worker 1"
        say(f"[3] worker 1 started (pid {worker.pid})")
        handle: WorkflowHandle[Welcome] = await DurableClient(store).start_workflow(
            welcome_flow, 123
        )
        say(f"[4] started workflow {handle.id}: welcome_flow(123)")
        await until(lambda: len(log_lines()) >= 3)  # send_welcome_email started
        worker.kill()  # SIGKILL: no clean-up, no drain, the lease left held
        await worker.wait()
        say(f"[5] send_welcome_email is running in worker 1: SIGKILL to pid {worker.pid}")
        killed_at = time.monotonic()
        worker = await start_worker(url)
        workers[worker.pid] = "worker 2"
        say(f"[6] worker 2 started (pid {worker.pid}); it takes the workflow over when the")
        say(f"    dead worker's lease expires (at most {LEASE_SECONDS} s)...")
        with anyio.fail_after(HANG_GUARD):
            status = await handle.wait()
        took = time.monotonic() - killed_at
        info = await handle.info()
        say(f"    {status.value} {took:.1f} s after the kill, in {info.attempts} attempts")
        if status is not WorkflowStatus.SUCCEEDED:
            say(f"    error: {await handle.error()}")
            return 1
        say(f"    output: {await handle.output(Welcome)!r}")
        report, as_promised = story(workers)
        say("[7] which worker ran each step:")
        for line in report:
            say(line)
        if not as_promised:
            say("unexpected: the steps did not run as described above")
            return 1
        say(
            "The workflow resumed at step 1 (send_welcome_email) in worker 2; step 0 "
            "(fetch_user) did not run again:"
        )
        say("its output was read back from the database. That is durability.")
        return 0
    finally:
        if worker is not None and worker.returncode is None:
            worker.send_signal(signal.SIGTERM)
            with anyio.fail_after(HANG_GUARD):
                code = await worker.wait()
            say(f"worker {len(workers)} stopped (SIGTERM) with exit code {code}")
        await store.close()


async def main() -> int:
    began = time.monotonic()
    url = database_url_from_env()
    say("durable-core quick start. It will:")
    number = 0
    for line in plan(url):
        if not line.startswith("   "):
            number += 1
            line = f"  {number}. {line}"
        say(line)
    say("")
    embedded = None
    if url is None:
        embedded = plugin_manager().hook.durable_embedded_database(data_dir=str(DATA_DIR))
        if embedded is None:
            say("the embedded PostgreSQL is not installed: pip install 'durable-core[embedded]'")
            return 2
        url = await embedded.start()
        say(f"[1] embedded PostgreSQL running at {url}")
    else:
        say(f"[1] using {DATABASE_URL_ENV}")
    try:
        code = await demo(url)
    finally:
        if embedded is not None:
            await embedded.stop()
    say(f"done in {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(anyio.run(main))
