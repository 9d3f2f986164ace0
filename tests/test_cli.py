"""The `durable` command, run as a real subprocess against real databases."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

import durable_core
from durable_core import DurableClient, WorkflowConfig, WorkflowStatus, workflow, workflow_step
from durable_core.cli.running import worker_config
from durable_core.runtime.config import SETTINGS
from durable_core.sql.schema import SCHEMA_VERSION
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore
from tests.conftest import drop_postgres_database, fresh_postgres_database

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

    migrated = run("migrate")
    assert migrated.returncode == 0, migrated.stderr
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
    refused = durable("dashboard", "--host", "0.0.0.0", "--token", "t0ken-t0ken-t0ken-t0ken")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--allowed-host" in refused.stderr
    bad = durable(
        "dashboard", "--token", "t0ken-t0ken-t0ken-t0ken", "--allowed-host", "a.*.example.com"
    )
    assert bad.returncode == 2 and "'*.example.com'" in bad.stderr, bad.stderr


def test_worker_concurrency_option_keeps_every_other_setting() -> None:
    environ = {"WORKFLOW_GROUP_COMMIT": "0", "WORKFLOW_STEP_ROW_AFTER_MS": "5"}
    config = worker_config(3, environ)
    assert (config.concurrency, config.group_commit, config.step_row_after_ms) == (3, 0, 5)
    from_env = worker_config(None, environ)
    for setting in SETTINGS:
        if setting.field != "concurrency":
            assert getattr(config, setting.field) == getattr(from_env, setting.field), setting


def bare(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``durable`` with no option added, in this environment less the durable variables,
    plus ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_")}
    return subprocess.run(
        [sys.executable, "-m", "durable_core", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**environment, **(env or {})},
    )


def one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    """The command failed as every CLI error does: exit 2, one line on stderr naming it."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert result.stderr.startswith("durable: error: "), result.stderr


def test_worker_refuses_to_start_without_an_app_or_a_database(tmp_path: Path) -> None:
    db = ["--database-url", f"sqlite:///{tmp_path / 'w.db'}"]
    one_line_error(bare("worker", *db), "durable worker needs --app MODULE")
    one_line_error(bare("worker", "--app", "tests.test_cli"), "durable worker needs a database")
    one_line_error(bare("worker", "--embedded", "--app", "tests.test_cli", *db), "not both")
    one_line_error(bare("worker", "--app", "json", *db), "json registered no workflow")
    # --app replaces $DURABLE_APP (no_such_module is not imported); without it, it is read.
    clash = "'tests.clash' is registered by 2 functions"
    env = {"DURABLE_APP": "no_such_module"}
    one_line_error(bare("worker", "--app", "tests.duplicate_app", *db, env=env), clash)
    one_line_error(bare("worker", *db, env={"DURABLE_APP": "tests.duplicate_app"}), clash)
    # A schedule that never fires stops the import, not the worker's boot.
    never = bare("worker", "--app", "tests.never_fires_app", *db)
    one_line_error(never, "cron expression '0 0 30 2 *' never fires")


def test_a_bad_log_level_or_format_is_one_line(tmp_path: Path) -> None:
    db = ["--database-url", f"sqlite:///{tmp_path / 'l.db'}"]
    one_line_error(bare("--log-level", "LOUD", "migrate", *db), "--log-level 'LOUD' is not a log")
    env = {"DURABLE_LOG_LEVEL": "verbose"}
    one_line_error(bare("migrate", *db, env=env), "$DURABLE_LOG_LEVEL 'verbose' is not a log")
    env = {"DURABLE_LOG_FORMAT": "yaml"}
    one_line_error(bare("migrate", *db, env=env), "$DURABLE_LOG_FORMAT 'yaml' is not a log")
    # Case does not matter; tests/test_metrics.py reads a worker's JSON lines.
    fine = bare("--log-level", "debug", "--log-format", "JSON", "migrate", *db)
    assert fine.returncode == 0, fine.stderr


async def test_migrate_prints_its_own_lines_not_alembics(tmp_path: Path, postgres_url: str) -> None:
    """At the default log level (INFO) `durable migrate` says what it did, and nothing of
    the Alembic context it runs on (``INFO alembic.runtime.migration: Context impl ...``)."""
    name = postgres_url.rsplit("/", 1)[1].split("?")[0]
    postgres = await fresh_postgres_database(postgres_url, f"{name}_quiet_migrate")
    try:
        for url in (f"sqlite:///{tmp_path / 'q.db'}", postgres):
            for _ in range(2):  # creating the tables, then finding them there
                result = bare("migrate", "--database-url", url)
                assert result.returncode == 0, result.stderr
                assert f"durable schema at version {SCHEMA_VERSION}" in result.stdout
                alembic = [line for line in result.stderr.splitlines() if "alembic" in line]
                assert alembic == [], f"{url}: {alembic}"
    finally:
        await drop_postgres_database(postgres)


@workflow_step
async def shout(text: str) -> str:
    raise ValueError(f"\x1b[2J\x1b[31mcannot shout {text}\x9b1m")


@workflow(max_attempts=1)
async def shouting(text: str) -> None:
    await shout(text)


@workflow
async def inbox(note: str) -> str:
    reply = await durable_core.recv("go")  # no timeout: it waits with no deadline
    return f"{note}: {reply['answer']}"


async def test_show_prints_no_control_sequence_and_never_the_forever_sentinel(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    url = ["--database-url", f"sqlite:///{tmp_path / 'durable.db'}"]
    client, runner = DurableClient(sqlite_store), WorkflowRunner(sqlite_store)
    title = "\x1b]0;owned\x07\x1b[8mhidden\x1b[0m\rnote"
    waiting = await client.start_workflow(inbox, title)
    assert await runner.run_once(waiting) is WorkflowStatus.WAITING
    assert (await waiting.info()).run_at.year == 9999, "a wait with no deadline stores FOREVER"
    failed = await client.start_workflow(shouting, "\x1b[1Aup")
    assert await runner.run_until_complete(failed) is WorkflowStatus.FAILED

    outputs = {
        args: durable(*args, *url)
        for args in [
            ("show", waiting.id),
            ("show", "--json", waiting.id),
            ("show", "--traceback", failed.id),
            ("list",),
            ("list", "--json"),
            ("stats", "--json"),
        ]
    }
    for args, result in outputs.items():
        assert result.returncode == 0, (args, result.stderr)
        assert "9999" not in result.stdout, (args, result.stdout)
        assert not {"\x1b", "\x9b", "\r", "\x07"} & set(result.stdout), (args, result.stdout)
    shown = outputs[("show", waiting.id)].stdout
    # Decoded as the dashboard shows it: a string's control characters are JSON escapes.
    assert 'input     ("\\u001b]0;owned\\u0007\\u001b[8mhidden\\u001b[0m\\rnote")\n' in shown
    assert "waiting   for a message on topic 'go'\n" in shown, "no 'until' date: it has none"
    [listed] = [r for r in json.loads(outputs[("list", "--json")].stdout) if r["id"] == waiting.id]
    assert (listed["run_at"], listed["wake_at"], listed["waiting_for"]) == (
        None,
        None,
        "message:go",
    )
    assert "cannot shout upup" not in outputs[("show", "--traceback", failed.id)].stdout
    assert (
        "builtins.ValueError: cannot shout up" in outputs[("show", "--traceback", failed.id)].stdout
    )
    stats = json.loads(outputs[("stats", "--json")].stdout)
    assert {(r["status"], r["oldest"]) for r in stats} == {("waiting", None)}

    # durable send wakes it; the message is JSON.
    sent = durable("send", waiting.id, '{"answer": 42}', "--topic", "go", *url)
    assert (sent.returncode, sent.stdout) == (0, f"sent to workflow {waiting.id} on topic 'go'\n")
    assert await runner.run_until_complete(waiting) is WorkflowStatus.SUCCEEDED
    assert await waiting.output() == f"{title}: 42"
    one_line_error(durable("send", waiting.id, "yes", *url), "the message is not valid JSON")
    one_line_error(durable("send", "no-such-id", "1", *url), "no such workflow")


async def test_fork_and_list_by_queue_and_error_a_page_at_a_time(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    url = ["--database-url", f"sqlite:///{tmp_path / 'durable.db'}"]
    client = DurableClient(sqlite_store)
    reports = [
        await client.with_options(queue="reports").start_workflow(hello, str(n)) for n in range(5)
    ]
    doomed_id = await failed_workflow(sqlite_store)

    def page(*args: str) -> tuple[list[str], str | None]:
        result = durable("list", *args, *url)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        cursor = lines.pop().split()[-1] if lines[-1].startswith("next page: ") else None
        return [line.split()[0] for line in lines[1:]], cursor

    seen, cursor, pages = [], None, 0
    while True:
        ids, cursor = page(
            "--queue", "reports", "--limit", "2", *(["--before", cursor] if cursor else [])
        )
        seen += ids
        pages += 1
        if cursor is None:
            break
        assert cursor == ids[-1]
    assert (pages, seen) == (3, [h.id for h in reversed(reports)])
    assert page("--error", "builtins.ValueError") == ([doomed_id], None)
    assert page("--error", "builtins.KeyError") == ([], None)
    as_json = durable("list", "--json", "--queue", "reports", "--limit", "4", *url)
    assert [r["id"] for r in json.loads(as_json.stdout)] == [h.id for h in reversed(reports)][:4]
    assert as_json.stderr == f"durable: next page: --before {reports[1].id}\n"

    forked = durable("fork", doomed_id, "--from-step", "1", *url)
    assert forked.returncode == 0, forked.stderr
    copy = await client.get(forked.stdout.strip())
    assert (copy.name, copy.status, copy.input) == (
        doomed.name,
        WorkflowStatus.PENDING,
        (await client.get(doomed_id)).input,
    )
    [cached] = await client.handle(copy.id).steps()
    assert (cached.step_index, cached.output) == (0, '"hello ada"')
    one_line_error(durable("fork", doomed_id, "--from-step", "-1", *url), "from_step is a step")
    one_line_error(durable("fork", "no-such-id", "--from-step", "0", *url), "no-such-id")


def test_a_taken_dashboard_port_is_one_line_before_any_url_is_logged(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        db = ["--database-url", f"sqlite:///{tmp_path / 'd.db'}"]
        result = bare("--log-level", "INFO", "dashboard", "--port", port, *db)
    one_line_error(result, f"cannot serve the dashboard on 127.0.0.1:{port}: the port is taken")
    assert "http://" not in result.stdout + result.stderr


def test_a_bad_or_taken_metrics_port_is_one_line(tmp_path: Path) -> None:
    db = ["--database-url", f"sqlite:///{tmp_path / 'm.db'}"]  # it never gets to its tables
    worker = ["worker", "--app", "tests.test_cli", *db]
    one_line_error(bare(*worker, "--metrics-port", "70000"), "--metrics-port '70000' is not a")
    env = {"DURABLE_METRICS_PORT": "http"}
    one_line_error(bare(*worker, env=env), "$DURABLE_METRICS_PORT 'http' is not a port number")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = bare(*worker, "--metrics-host", "127.0.0.1", "--metrics-port", port)
    one_line_error(result, f"cannot serve metrics on 127.0.0.1:{port}: the port is taken")


def test_an_embedded_worker_says_so_in_its_first_line(tmp_path: Path) -> None:
    data = tmp_path / "pgdata"
    result = bare(
        "worker", "--embedded", "--embedded-dir", str(data), "--app", "tests.test_cli",
        env={"DURABLE_DATABASE_URL": "postgresql://nobody@192.0.2.1/not-this-one"},
    )  # fmt: skip
    first = result.stderr.splitlines()[0]
    assert "WARNING durable_core.cli: durable worker --embedded: running on the embedded " in first
    assert f"PostgreSQL in {data} (not $DURABLE_DATABASE_URL)" in first
    # It ran there: a fresh embedded database has no tables yet.
    assert result.returncode == 2 and "durable migrate" in result.stderr.splitlines()[-1]
    assert not (data / "postmaster.pid").exists(), "the server was stopped"


def test_a_bad_argument_is_one_line_too() -> None:
    one_line_error(bare("worker", "--concurrency", "many"), "worker: argument --concurrency")
    one_line_error(bare("schedule", "add", "x"), "schedule add: the following arguments")
    shown = bare("list", "--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: durable list")
