"""`durable schedule add --overlap`, `trigger` and `backfill` on SQLite: a backfill as a
real subprocess, the rest through the same entry point in-process (cheaper), errors
included (one line on stderr, exit 2)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from durable_core import workflow
from durable_core.cli import main
from durable_core.definitions.schedules import tick_workflow_id
from tests.test_cli import durable

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """The root logger as it was: the command in-process sets its own handler and level."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@workflow(name="cli.hourly")
async def hourly(team: str) -> str:
    return team


async def test_overlap_trigger_and_backfill_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--database-url", f"sqlite:///{tmp_path / 'durable.db'}"]

    async def run(*argv: str) -> tuple[int, str, str]:
        # In a thread: the command runs its own event loop, as from a shell.
        code = await anyio.to_thread.run_sync(main, ["--log-level", "WARNING", *argv, *db])
        out, err = capsys.readouterr()
        return code, out, err

    assert (await run("migrate"))[0] == 0
    added = await run(
        "schedule", "add", "hours", "cli.hourly", "0 * * * *", "--args", '["ops"]',
        "--overlap", "buffer_one", "--app", "tests.test_cli_schedule_backfill",
    )  # fmt: skip
    assert added[0] == 0 and added[1].startswith("schedule hours: next tick"), added
    window = ["--start", "2026-01-01T00:30", "--end", "2026-01-01T03:00+00:00"]
    filled = durable("schedule", "backfill", "hours", *window, *db)
    assert filled.returncode == 0, filled.stderr
    ticks = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in (1, 2)]
    assert filled.stdout.splitlines() == [
        "schedule hours: backfill from 2026-01-01T00:30:00+00:00 to 2026-01-01T03:00:00+00:00 "
        "started 2 workflow(s)",
        *(tick_workflow_id("hours", t) for t in ticks),
    ]
    assert (await run("schedule", "backfill", "hours", *window))[1].splitlines() == [
        filled.stdout.splitlines()[0].replace("started 2", "started 0")
    ], "a repeat starts nothing twice"
    code, out, _ = await run("schedule", "trigger", "hours")
    assert code == 0 and out.startswith("schedule hours: started workflow ")
    latest = out.split()[-1]
    held = (await run("schedule", "trigger", "hours"))[1]
    assert held == "schedule hours: its latest run has not finished; buffered (buffer_one)\n"
    [row] = json.loads((await run("schedule", "list", "--json"))[1])
    assert (row["overlap"], row["latest_id"]) == ("buffer_one", latest)
    assert row["buffered_tick"] is not None

    errors = {
        "--start is a moment in ISO 8601": ["--start", "yesterday", "--end", "2026-01-02"],
        "a backfill window starts before it ends": ["--start", "2026-01-02", "--end", "2026-01-01"],
        "holds more than 1000 ticks": ["--start", "2020-01-01", "--end", "2026-01-01"],
        "overlap is one of skip, buffer_one, allow_all": [*window, "--overlap", "some"],
    }
    for says, argv in errors.items():
        code, out, err = await run("schedule", "backfill", "hours", *argv)
        assert (code, out) == (2, ""), says
        assert err.startswith("durable: error: ") and says in err and err.count("\n") == 1, err
    code, _, err = await run("schedule", "backfill", "nothing", *window)
    assert code == 2 and err == "durable: error: no schedule is named 'nothing'\n"
