"""Prometheus metrics scraped from a real worker process and a real dashboard process.

Known workflows (``tests.metrics_app``) run on PostgreSQL; ``/metrics`` is read
over HTTP and parsed with prometheus-client's own parser, and every figure is
compared with what those workflows did.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import durable_core.observers.metrics
from durable_core import DurableClient, WorkflowHandle, WorkflowStatus
from durable_core.runtime.worker_process import WorkerProcess
from durable_postgres import PostgresStore
from tests import metrics_app as app
from tests.conftest import POSTGRES_URL, fresh_postgres_database

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = [sys.executable, "-m", "durable_core", "dashboard"]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; a sample that is not there is a failure, not a zero."""
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no sample {name}{labels} in {sorted(n for n, _ in samples)}"
    return samples[key]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/plain; version=")
        return parse(response.read().decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Database:
    url: str
    store: PostgresStore


@pytest.fixture
async def database() -> AsyncIterator[Database]:
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await fresh_postgres_database(POSTGRES_URL, f"{base}_metrics")
    store = PostgresStore(url)
    await store.open()
    await store.apply_schema()
    try:
        yield Database(url, store)
    finally:
        await store.close()


@pytest.fixture
def here() -> Iterator[durable_core.observers.metrics.PrometheusObserver]:
    """This (the starting) process's own metrics."""
    observer = durable_core.observers.metrics.instrument()
    try:
        yield observer
    finally:
        durable_core.observers.metrics.uninstrument()


@pytest.fixture
def dashboard(database: Database) -> Iterator[str]:
    """A ``durable dashboard`` process on the database: the URL of its /metrics."""
    port = free_port()
    process = subprocess.Popen(
        [*DASHBOARD, "--database-url", database.url, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    metrics = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(metrics, timeout=2).close()
                break
            except (urllib.error.URLError, OSError):  # refused, reset or slow to answer
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    pytest.fail(f"the dashboard did not start: {process.communicate()[0]!r}")
                time.sleep(0.1)
        yield metrics
    finally:
        process.terminate()
        process.wait(timeout=120)


async def becomes(handle: WorkflowHandle[Any], status: WorkflowStatus) -> None:
    for _ in range(1200):
        if await handle.status() is status:
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"workflow {handle.id} never became {status.value}")


async def test_a_worker_serves_metrics_of_what_it_ran_and_of_the_backlog(
    database: Database, here: durable_core.observers.metrics.PrometheusObserver, tmp_path: Path
) -> None:
    port, release = free_port(), tmp_path / "release"
    env = {
        "DURABLE_METRICS_PORT": str(port),
        "DURABLE_METRICS_HOST": "127.0.0.1",
        "DURABLE_LOG_FORMAT": "json",
        "DURABLE_LOG_LEVEL": "INFO",
        "WORKFLOW_CONCURRENCY": "4",
        "WORKFLOW_RETRY_BACKOFF_SECS": "0",
        "METRICS_RELEASE_FILE": str(release),
    }
    client = DurableClient(database.store)
    worker = WorkerProcess(
        database.url, ["tests.metrics_app"], log_path=tmp_path / "w.log", env=env
    )
    metrics = f"http://127.0.0.1:{port}/metrics"
    with worker:
        held = await client.start_workflow(app.hold)
        await becomes(held, WorkflowStatus.RUNNING)
        during = scrape(metrics)
        assert value(during, "durable_workflows_in_flight") == 1
        assert value(during, "durable_worker_slots") == 4
        release.touch()
        assert await held.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED

        oks = await client.start_workflows(app.ok, [(n,) for n in range(3)])
        broken = await client.start_workflow(app.broken)
        waiting = await client.start_workflow(app.waits)
        await client.with_options(queue="elsewhere").start_workflow(app.unserved)
        for handle in oks:
            assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
        assert await broken.wait_with_timeout(60) is WorkflowStatus.FAILED
        await becomes(waiting, WorkflowStatus.WAITING)
        after = scrape(metrics)
        stopped = worker.stop()
    assert stopped == 0

    def settles(workflow: str, outcome: str) -> float:
        return value(after, "durable_workflow_settles_total", workflow=workflow, outcome=outcome)

    assert settles(app.ok.name, "succeeded") == 3
    assert settles(app.hold.name, "succeeded") == 1
    assert (settles(app.broken.name, "retry"), settles(app.broken.name, "failed")) == (1, 1)
    assert settles(app.waits.name, "waiting") == 1
    assert value(after, "durable_workflows_in_flight") == 0
    assert value(after, "durable_claimed_workflows_total") == 7  # 3 + hold + 2 broken + waits
    assert value(after, "durable_claim_duration_seconds_count") >= 1

    def timed(name: str, **labels: str) -> float:
        return value(after, f"{name}_count", **labels)

    for step in (app.fetch, app.store):
        labels = {"workflow": app.ok.name, "step": step.name, "outcome": "succeeded"}
        assert timed("durable_step_duration_seconds", **labels) == 3
    failed = {"workflow": app.broken.name, "step": app.explode.name, "outcome": "failed"}
    assert timed("durable_step_duration_seconds", **failed) == 2
    hold_step = {"workflow": app.hold.name, "step": app.until_released.name, "outcome": "succeeded"}
    assert value(after, "durable_step_duration_seconds_sum", **hold_step) > 0
    attempt = "durable_workflow_attempt_duration_seconds"
    assert timed(attempt, workflow=app.ok.name, outcome="succeeded") == 3
    assert timed(attempt, workflow=app.broken.name, outcome="retry") == 1
    assert timed("durable_workflow_queue_wait_seconds", workflow=app.ok.name) == 3

    # The backlog, read from the store at the scrape.
    assert value(after, "durable_store_up") == 1
    pending = {"queue": "elsewhere", "workflow": app.unserved.name}
    assert value(after, "durable_backlog_workflows", status="pending", **pending) == 1
    assert value(after, "durable_backlog_oldest_pending_age_seconds", **pending) > 0
    assert (
        value(
            after,
            "durable_backlog_workflows",
            queue="default",
            workflow=app.waits.name,
            status="waiting",
        )
        == 1
    )
    assert not [
        k for k in after if k[0] == "durable_backlog_workflows" and ("status", "running") in k[1]
    ]

    # Group commit: the flushes the metrics saw are those the worker counted itself.
    lines = [json.loads(line) for line in worker.log().splitlines() if line.strip()]
    [last] = [
        line for line in lines if line["message"].startswith(f"worker {worker.worker_id} stopped")
    ]
    writes, flushes = map(int, re.findall(r"\((\d+) writes in (\d+) flushes\)", last["message"])[0])
    assert value(after, "durable_group_commit_flush_writes_sum") == writes > 0
    assert value(after, "durable_group_commit_flush_writes_count") == flushes > 0

    # JSON logs: one object a line, with the structured fields.
    [started] = [
        line for line in lines if line["message"].startswith(f"worker {worker.worker_id} started")
    ]
    assert (started["level"], started["logger"], started["worker_id"]) == (
        "INFO",
        "durable_core.worker",
        worker.worker_id,
    )
    assert started["message"].endswith(f", on {database.store.description}"), "its database"
    assert {"time", "level", "logger", "message"} <= set(lines[0])

    # The starting process counts its own starts.
    mine = parse(generate_latest(here.registry).decode())
    for workflow, n in ((app.ok, 3), (app.broken, 1), (app.waits, 1), (app.unserved, 1)):
        assert value(mine, "durable_workflow_starts_total", workflow=workflow.name) == n


async def test_the_dashboard_serves_the_backlog_and_the_attempts_that_end(
    database: Database, dashboard: str, tmp_path: Path
) -> None:
    client = DurableClient(database.store)
    queued = await client.start_workflows(app.ok, [(1,), (2,)])
    first = scrape(dashboard)
    assert value(first, "durable_store_up") == 1
    ok_pending = {"queue": "default", "workflow": app.ok.name, "status": "pending"}
    assert value(first, "durable_backlog_workflows", **ok_pending) == 2
    assert not [k for k in first if k[0] == "durable_attempts_ended_total"], "counted from now on"

    env = {"WORKFLOW_RETRY_BACKOFF_SECS": "0"}
    with WorkerProcess(database.url, ["tests.metrics_app"], log_path=tmp_path / "w.log", env=env):
        broken = await client.start_workflow(app.broken)
        for handle in queued:
            assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
        assert await broken.wait_with_timeout(60) is WorkflowStatus.FAILED
    second = scrape(dashboard)
    ended = "durable_attempts_ended_total"
    assert value(second, ended, queue="default", outcome="succeeded") == 2
    assert value(second, ended, queue="default", outcome="retry") == 1
    assert value(second, ended, queue="default", outcome="failed") == 1
    assert not [k for k in second if k[0] == "durable_backlog_workflows"], "nothing is left"
