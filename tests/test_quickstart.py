"""``make quickstart``'s demonstration, run as the make target runs it (on the test
PostgreSQL instead of the embedded one): a worker SIGKILLed in the middle of the second step,
another worker resuming the workflow at that step, the first step not run again."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import POSTGRES_URL, drop_postgres_database, fresh_postgres_database

ROOT = Path(__file__).resolve().parents[1]


def test_the_quick_start_kills_a_worker_mid_step_and_another_resumes_at_that_step() -> None:
    url = asyncio.run(fresh_postgres_database(POSTGRES_URL, "quickstart"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DURABLE_", "WORKFLOW_"))}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "examples.quickstart"],
            cwd=ROOT,
            env=env | {"DURABLE_DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        asyncio.run(drop_postgres_database(url))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "  5. kill the worker with SIGKILL while send_welcome_email runs" in out
    assert "use the PostgreSQL at DURABLE_DATABASE_URL" in out and "pgserver" not in out
    first = re.search(r"\[3\] worker 1 started \(pid (\d+)\)", out)
    second = re.search(r"\[6\] worker 2 started \(pid (\d+)\)", out)
    assert first and second, out
    one, two = first.group(1), second.group(1)
    assert f"[5] send_welcome_email is running in worker 1: SIGKILL to pid {one}" in out
    assert re.search(r"succeeded [\d.]+ s after the kill, in 2 attempts", out), out
    assert f"  step 0 fetch_user          worker 1 (pid {one}) ran\n" in out
    assert (
        f"  step 1 send_welcome_email  worker 1 (pid {one}) killed mid-step; "
        f"worker 2 (pid {two}) ran\n"
    ) in out
    assert f"  step 2 record_sent         worker 2 (pid {two}) ran\n" in out
    assert "step 0 (fetch_user) did not run again" in out
    assert "worker 2 stopped (SIGTERM) with exit code 0" in out
