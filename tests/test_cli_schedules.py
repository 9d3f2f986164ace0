"""`durable schedule add|list|pause|resume|delete`, run as real subprocesses on SQLite."""

from __future__ import annotations

import json
from pathlib import Path

from durable_core import DurableClient, workflow
from durable_sqlite import SQLiteStore
from tests.test_cli import durable


@workflow(name="cli.digest")
async def digest(team: str, limit: int = 10) -> str:
    return f"{limit} items for {team}"


async def test_schedules_from_the_command_line(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    db = ["--database-url", f"sqlite:///{tmp_path / 'durable.db'}"]
    app = ["--app", "tests.test_cli_schedules"]
    added = durable(
        "schedule", "add", "digest", "cli.digest", "0 9 * * 1-5", "--timezone", "Europe/Paris",
        "--catch-up", "2", "--args", '["ops"]', "--kwargs", '{"limit": 3}', *app, *db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("schedule digest: next tick ")
    listed = durable("schedule", "list", "--json", *db)
    [row] = json.loads(listed.stdout)
    assert {k: row[k] for k in ("name", "workflow", "cron", "timezone", "catch_up", "paused")} == {
        "name": "digest",
        "workflow": "cli.digest",
        "cron": "0 9 * * 1-5",
        "timezone": "Europe/Paris",
        "catch_up": 2,
        "paused": False,
    }
    assert json.loads(row["input"]) == {"args": ["ops"], "kwargs": {"limit": 3}}
    stored = await DurableClient(sqlite_store).get_schedule("digest")
    assert stored.next_tick.isoformat() == row["next_tick"] and stored.next_tick.hour in (7, 8)

    assert durable("schedule", "pause", "digest", *db).stdout == "schedule digest paused\n"
    table = durable("schedule", "list", *db).stdout.splitlines()
    assert table[0].split() == ["name", "state", "next", "tick", "(UTC)", "cron", "workflow"]
    assert table[1].split()[:2] == ["digest", "paused"]
    assert table[1].endswith("0 9 * * 1-5 Europe/Paris  cli.digest")
    resumed = durable("schedule", "resume", "digest", *db)
    assert resumed.returncode == 0 and resumed.stdout.startswith("schedule digest resumed")
    assert durable("schedule", "delete", "digest", *db).stdout == "schedule digest deleted\n"
    assert json.loads(durable("schedule", "list", "--json", *db).stdout) == []

    errors = {
        "no schedule is named 'digest'": ["schedule", "pause", "digest", *db],
        "is not a cron expression": ["schedule", "add", "d", "cli.digest", "bad", *app, *db],
        "cron expression '0 0 30 2 *' never fires": [
            "schedule", "add", "d", "cli.digest", "0 0 30 2 *", "--args", '["ops"]', *app, *db,
        ],
        "unknown time zone 'Nowhere'": [
            "schedule", "add", "d", "cli.digest", "@daily", "--timezone", "Nowhere", *app, *db,
        ],
        "arguments do not fit workflow cli.digest": [
            "schedule", "add", "d", "cli.digest", "@daily", *app, *db,
        ],
        "no registered workflow is named 'nope'": [
            "schedule", "add", "d", "nope", "@daily", *app, *db,
        ],
    }  # fmt: skip
    for expected, args in errors.items():
        result = durable(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr and result.stderr.count("\n") == 1, result.stderr
