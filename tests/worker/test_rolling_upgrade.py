"""A worker of the previous release runs correctly on a schema this release migrated.

The previous release is a commit of this repository (:data:`PREVIOUS`): its files
(:data:`PREVIOUS_FILES`) are extracted and its worker run from there (``PYTHONPATH`` on it)
against a database this checkout migrated; the workflows this checkout's client starts
all complete, each step once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

from durable_core import DurableClient, WorkflowStatus
from durable_postgres import PostgresStore
from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.worker import app
from tests.worker.conftest import ROOT

PREVIOUS = "3b8ebcd"
"""The release before this one: the last commit with the previous schema version."""
PREVIOUS_FILES = ROOT / "tests" / "fixtures" / "previous_release.tar.gz"
"""What of :data:`PREVIOUS` the worker runs, as a release ships it (a checkout of this
repository need not hold its history). Made by ``git archive --format=tar.gz 3b8ebcd
durable_core durable_postgres durable_sqlite durable_mysql tests/__init__.py
tests/worker/__init__.py tests/worker/app.py``; a release that changes the schema
replaces it with its own."""
TOTAL = 40


def _previous_tree(into: Path) -> Path:
    """The previous release's files, extracted into ``into``."""
    with tarfile.open(PREVIOUS_FILES) as tar:
        tar.extractall(into, filter="data")
    return into


async def test_a_worker_of_the_previous_release_runs_on_this_releases_schema(
    postgres_url: str, tmp_path: Path
) -> None:
    old = _previous_tree(tmp_path / "previous")
    stem = postgres_url.rsplit("/", 1)[1].split("?")[0]
    url = await fresh_postgres_database(postgres_url, f"{stem}_rolling")
    env = {**os.environ, "DURABLE_DATABASE_URL": url, "PYTHONPATH": str(old)}
    which = subprocess.run(
        [sys.executable, "-c", "import durable_core; print(durable_core.__file__)"],
        env=env, cwd=old, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert which.stdout.startswith(str(old)), f"the previous release's code runs: {which}"
    store = PostgresStore(url)
    await store.open()
    log_path = tmp_path / "previous-worker.log"
    worker: subprocess.Popen[bytes] | None = None
    try:
        await store.apply_schema()  # this release's schema
        await store.connector.pool.execute(app.SIDE_TABLE_DDL)
        with log_path.open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "durable_core", "worker", "--app", "tests.worker.app",
                 "--bootstrap", "tests.worker.app:bootstrap"],
                env=env, cwd=old, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        handles = await DurableClient(store).start_workflows(
            app.three_steps, [(n,) for n in range(TOTAL)]
        )
        for handle in handles:
            assert await handle.wait_with_timeout(180) is WorkflowStatus.SUCCEEDED
        assert [await h.output() for h in handles] == [(n + 1) * 2 - 3 for n in range(TOTAL)]
        runs = await store.connector.pool.fetch(
            "SELECT workflow_id, step, count(*) AS n FROM step_runs GROUP BY workflow_id, step"
        )
        assert len(runs) == TOTAL * 3 and all(row["n"] == 1 for row in runs)
        workers = await store.connector.pool.fetch("SELECT DISTINCT worker FROM step_runs")
        assert len(workers) == 1, "the previous release's worker ran every step"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=120) == 0, log_path.read_text()
        assert "Traceback" not in log_path.read_text()
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(timeout=120)
        await store.close()
        await drop_postgres_database(url)
