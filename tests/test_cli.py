"""The `durable` command, run as a real subprocess against real databases."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

import durable_core
from durable_core import DurableClient, WorkflowConfig, WorkflowStatus, workflow, workflow_step
from durable_core.cli.running import worker_config
from durable_core.config import SETTINGS
from durable_core.schema import SCHEMA_VERSION
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]


def durable(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", "--log-level", "WARNING", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@workflow_step
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow_step
async def explode(text: str) -> None:
    raise ValueError(f"cannot deliver {text!r}")


@workflow(max_attempts=1)
async def doomed(name: str) -> None:
    await explode(await greet(name))


async def failed_workflow(store: SQLiteStore) -> str:
    handle = await DurableClient(store).start_workflow(doomed, "ada")
    assert await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    return handle.id


def test_migrate_creates_the_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    result = durable("migrate", "--database-url", url)
    assert result.returncode == 0, result.stderr
    tables = sa.inspect(sa.create_engine(url)).get_table_names()
    assert {"workflows", "workflow_steps"} <= set(tables)
    assert durable("migrate", "--database-url", url).returncode == 0, "migrate is idempotent"


async def test_show_says_why_and_on_which_step_a_workflow_failed(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    workflow_id = await failed_workflow(sqlite_store)
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    shown = durable("show", workflow_id, "--database-url", url)
    assert shown.returncode == 0, shown.stderr
    assert "status    failed" in shown.stdout
    assert "builtins.ValueError: cannot deliver 'hello ada'" in shown.stdout
    assert "in step 1 (tests.test_cli.explode)" in shown.stdout
    data = json.loads(durable("show", workflow_id, "--json", "--database-url", url).stdout)
    assert data["status"] == "failed" and data["error"]["step_name"] == "tests.test_cli.explode"
    assert [s["status"] for s in data["steps"]] == ["succeeded", "failed"]

    def listed(status: str) -> list[str]:
        result = durable("list", "--status", status, "--json", "--database-url", url)
        return [item["id"] for item in json.loads(result.stdout)]

    assert listed("failed") == [workflow_id]
    assert listed("pending") == []


FLAKY_FAILURES: list[str] = []


@workflow_step
async def flaky(name: str) -> str:
    if len(FLAKY_FAILURES) < 2:
        FLAKY_FAILURES.append(name)
        raise RuntimeError(f"try {len(FLAKY_FAILURES)} of {name} <failed>")
    return name


@workflow(max_attempts=3)
async def eventually_greets(name: str) -> str:
    return await greet(await flaky(name))


async def test_show_lists_the_failed_tries_under_their_step(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    FLAKY_FAILURES.clear()
    handle = await DurableClient(sqlite_store).start_workflow(eventually_greets, "bo")
    runner = WorkflowRunner(sqlite_store, WorkflowConfig(retry_backoff_secs=0))
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    shown = durable("show", handle.id, "--database-url", url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.endswith("tests.test_cli.flaky")))
    assert "succeeded  runs=3" in lines[at]
    for n in (1, 2):
        line = lines[at + n]
        assert line.lstrip().startswith(f"try {n} ")
        assert line.endswith(f"failed  builtins.RuntimeError: try {n} of bo <failed>")
    assert "try" not in lines[at + 3], "the greeting never failed"
    data = json.loads(durable("show", handle.id, "--json", "--database-url", url).stdout)
    flaky_step, greet_step = data["steps"]
    assert [t["try"] for t in flaky_step["failed_tries"]] == [1, 2]
    assert flaky_step["failed_tries"][1]["error"]["message"] == "try 2 of bo <failed>"
    assert greet_step["failed_tries"] == [] and greet_step["path"] is None


async def test_retry_and_cancel(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    workflow_id = await failed_workflow(sqlite_store)
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    retried = durable("retry", workflow_id, "--database-url", url)
    assert retried.returncode == 0, retried.stderr
    record = await sqlite_store.get_workflow(workflow_id)
    assert record is not None and record.status is WorkflowStatus.PENDING and record.attempts == 0
    steps = await sqlite_store.load_steps(workflow_id)
    assert steps[0].status.value == "succeeded", "the succeeded step stays cached"

    cancelled = durable("cancel", workflow_id, "--database-url", url)
    assert cancelled.returncode == 0, cancelled.stderr
    record = await sqlite_store.get_workflow(workflow_id)
    assert record is not None and record.status is WorkflowStatus.CANCELLED

    again = durable("cancel", workflow_id, "--database-url", url)
    assert again.returncode == 2
    assert "only pending, running or waiting workflows can be cancelled" in again.stderr


def test_bad_input_gets_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    assert durable("migrate", "--database-url", url).returncode == 0
    missing = durable("show", "no-such-id", "--database-url", url)
    assert missing.returncode == 2 and "no workflow with id 'no-such-id'" in missing.stderr
    unknown = durable("list", "--database-url", "nosuch://host/db")
    assert unknown.returncode == 2
    assert "no installed backend accepts" in unknown.stderr
    assert "postgresql://" in unknown.stderr and "sqlite:///" in unknown.stderr
    no_tables = durable("list", "--database-url", f"sqlite:///{tmp_path / 'empty.db'}")
    assert no_tables.returncode == 2 and "durable migrate" in no_tables.stderr
    assert "Traceback" not in missing.stderr + unknown.stderr + no_tables.stderr


def test_worker_refuses_to_boot_on_duplicate_workflow_names(tmp_path: Path) -> None:
    result = durable(
        "worker", "--app", "tests.duplicate_app", "--database-url", f"sqlite:///{tmp_path}/d.db"
    )
    assert result.returncode == 2
    assert "'tests.clash' is registered by 2 functions" in result.stderr
    assert "first_definition" in result.stderr and "second_definition" in result.stderr


def test_alembic_writes_the_revision_once(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    written = durable("alembic", "--versions-dir", str(versions), "--down-revision", "abc123")
    assert written.returncode == 0, written.stderr
    [revision] = versions.glob("*_create_durable_workflow_tables.py")
    text = revision.read_text()
    assert "down_revision: str | None = 'abc123'" in text
    assert "op.create_table('workflows'" in text and "op.create_table('workflow_steps'" in text
    assert written.stdout.count("wrote ") == len(list(versions.glob("*.py"))) == SCHEMA_VERSION
    twice = durable("alembic", "--versions-dir", str(versions))
    assert twice.returncode == 2 and "already exist" in twice.stderr


@workflow
async def waits_for_payment(order: str) -> str:
    await greet(order)
    await durable_core.sleep(timedelta(hours=2))
    payment = await durable_core.recv("payment", timeout=timedelta(days=1))
    return f"{order}: {payment}"


async def test_list_and_show_say_what_a_waiting_workflow_waits_for(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(waits_for_payment, "o-1")
    runner = WorkflowRunner(sqlite_store)
    assert await runner.run_once(handle) is WorkflowStatus.WAITING
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    listed = durable("list", "--database-url", url, "--status", "waiting")
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if handle.id in line]
    assert "waiting" in row and "(waiting for its sleep to end until 20" in row
    runner.clock.advance(timedelta(hours=2))
    assert await runner.run_once(handle) is WorkflowStatus.WAITING
    shown = durable("show", "--database-url", url, handle.id)
    assert shown.returncode == 0, shown.stderr
    deadline = (await handle.info()).wake_at
    assert deadline is not None
    assert (
        f"waiting   for a message on topic 'payment' until "
        f"{deadline.strftime('%Y-%m-%d %H:%M:%S')} UTC"
    ) in shown.stdout
    assert "waiting    runs=1  durable.recv" in shown.stdout
    as_json = json.loads(durable("show", "--json", "--database-url", url, handle.id).stdout)
    assert as_json["waiting_for"] == "message:payment"
    assert as_json["wake_at"] == deadline.isoformat()


def test_version() -> None:
    result = durable("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"durable {importlib.metadata.version('durable-core')}"


def into_a_closed_pipe(*args: str) -> tuple[int, str]:
    """Run ``durable`` with a stdout nobody reads any more (``durable ... | head -1`` once
    head has exited): its exit code and stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "durable_core", "--log-level", "WARNING", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    finally:
        os.close(write)
    return proc.returncode, proc.stderr


async def test_list_and_show_into_a_closed_pipe_stop_quietly(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    workflow_id = await failed_workflow(sqlite_store)
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    for args in (
        ["list"],
        ["list", "--json"],
        ["show", workflow_id],
        ["show", "--json", workflow_id],
    ):
        code, stderr = into_a_closed_pipe(*args, "--database-url", url)
        assert (code, stderr) == (128 + signal.SIGPIPE, ""), args


@workflow
async def hello(name: str, punctuation: str = "!") -> str:
    return await greet(name) + punctuation


async def test_start_enqueues_a_registered_workflow(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    common = ["--app", "tests.test_cli", "--database-url", url]
    started = durable(
        "start", hello.name, "--args", '["ada"]', "--kwargs", '{"punctuation": "?"}', *common
    )
    assert started.returncode == 0, started.stderr
    workflow_id = started.stdout.strip()
    assert (
        await WorkflowRunner(sqlite_store).run_until_complete(workflow_id)
        is WorkflowStatus.SUCCEEDED
    )
    assert await DurableClient(sqlite_store).handle(workflow_id).output() == "hello ada?"

    chosen = [
        durable("start", hello.name, "--args", '["bob"]', "--id", "hello-bob", *common)
        for _ in range(2)
    ]
    assert [(r.returncode, r.stdout) for r in chosen] == [(0, "hello-bob\n")] * 2, "started once"
    assert len(await sqlite_store.list_workflows(name=hello.name)) == 2


def test_start_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    assert durable("migrate", "--database-url", url).returncode == 0
    common = ["--app", "tests.test_cli", "--database-url", url]
    cases = {
        "is not valid JSON": ["start", hello.name, "--args", '["ada"', *common],
        "--args takes an array in JSON": [
            "start",
            hello.name,
            "--args",
            '{"name": "ada"}',
            *common,
        ],
        "--kwargs takes an object in JSON": ["start", hello.name, "--kwargs", "[1]", *common],
        "no registered workflow is named 'tests.test_cli.nope'": [
            "start",
            "tests.test_cli.nope",
            *common,
        ],
        "imported by --app": ["start", "tests.test_cli.nope", *common],
        "arguments do not fit workflow": ["start", hello.name, "--args", "[1, 2, 3]", *common],
        "cannot import workflow module 'no_such_module'": [
            "start",
            hello.name,
            "--app",
            "no_such_module",
            "--database-url",
            url,
        ],
        "cannot start it again": [
            "start",
            hello.name,
            "--args",
            '["eve"]',
            "--id",
            "hello-bob",
            *common,
        ],
    }
    assert (
        durable("start", hello.name, "--args", '["bob"]', "--id", "hello-bob", *common).returncode
        == 0
    )
    for expected, args in cases.items():
        result = durable(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert result.stdout == ""
    assert durable("list", "--json", "--database-url", url).stdout.count('"id"') == 1


def test_start_uses_the_embedded_database_when_no_url_is_given(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DURABLE_DATABASE_URL"}
    env["DURABLE_EMBEDDED_DIR"] = str(tmp_path / "pgdata")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "durable_core", "--log-level", "WARNING", *args]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env
        )

    assert run("migrate").returncode == 0
    started = run("start", hello.name, "--app", "tests.test_cli", "--args", '["ada"]')
    assert started.returncode == 0, started.stderr
    [listed] = json.loads(run("list", "--json").stdout)
    assert (listed["id"], listed["name"], listed["status"]) == (
        started.stdout.strip(),
        hello.name,
        "pending",
    )
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists(), "the server was stopped"


async def test_stats_counts_what_is_left_by_queue_name_and_status(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    empty = durable("stats", "--database-url", url)
    assert (empty.returncode, empty.stdout.strip()) == (0, "nothing pending, running or waiting")
    client = DurableClient(sqlite_store)
    await client.start_workflows(hello, [("a",), ("b",)])
    await client.with_options(queue="reports").start_workflow(hello, "c")
    shown = durable("stats", "--database-url", url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()[1:]
    assert [line.split()[:3] + line.split()[-1:] for line in lines[:2]] == [
        ["default", "pending", "2", hello.name],
        ["reports", "pending", "1", hello.name],
    ]
    # No worker runs on this database: stats say so for each pending name.
    assert [line.split(" since ")[0] for line in lines[2:]] == [
        f"no live worker serves {hello.name} (queue default): 2 pending",
        f"no live worker serves {hello.name} (queue reports): 1 pending",
    ]
    as_json = json.loads(durable("stats", "--json", "--database-url", url).stdout)
    assert [(r["queue"], r["status"], r["count"], r["unserved"]) for r in as_json] == [
        ("default", "pending", 2, True),
        ("reports", "pending", 1, True),
    ]


def test_dashboard_on_every_interface_needs_the_names_it_is_reached_by() -> None:
    refused = durable("dashboard", "--host", "0.0.0.0", "--token", "t0ken")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--allowed-host" in refused.stderr
    bad = durable("dashboard", "--token", "t0ken", "--allowed-host", "a.*.example.com")
    assert bad.returncode == 2 and "'*.example.com'" in bad.stderr, bad.stderr


def test_worker_concurrency_option_keeps_every_other_setting() -> None:
    environ = {"WORKFLOW_GROUP_COMMIT": "0", "WORKFLOW_STEP_ROW_AFTER_MS": "5"}
    config = worker_config(3, environ)
    assert (config.concurrency, config.group_commit, config.step_row_after_ms) == (3, 0, 5)
    from_env = worker_config(None, environ)
    for setting in SETTINGS:
        if setting.field != "concurrency":
            assert getattr(config, setting.field) == getattr(from_env, setting.field), setting
