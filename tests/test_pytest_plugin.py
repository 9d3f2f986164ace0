"""The user-facing pytest plugin (``durable_core.pytest_plugin``), as a user's test run sees it.

Each scenario is a user's test folder run by pytest in a fresh process
(pytester), which loads the plugin from its installed entry point and knows
nothing of this project's conftest files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from tests.conftest import POSTGRES_URL, drop_postgres_database, fresh_postgres_database

pytest_plugins = ["pytester"]

USER_WORKFLOWS = """
import os
from datetime import timedelta

from durable_core import recv, sleep, workflow, workflow_step


@workflow_step
async def process_id() -> int:
    return os.getpid()


@workflow
async def trial(user: str) -> str:
    await sleep(timedelta(days=3))
    card = await recv("upgrade", timeout=timedelta(days=1))
    return f"{user}: {'upgraded' if card else 'expired'}"


@workflow_step
async def flag() -> str | None:
    return os.environ.get("USER_FLAG")


@workflow
async def where_am_i() -> tuple[int, str | None]:
    return await process_id(), await flag()
"""

SQLITE_TESTS = """
from datetime import timedelta

import pytest
from durable_core import DurableClient, WorkflowStatus

from user_workflows import trial


@pytest.mark.anyio
async def test_time_skips(durable_sqlite_store, workflow_runner):
    assert await durable_sqlite_store.list_workflows() == []  # a fresh database
    handle = await DurableClient(durable_sqlite_store).start_workflow(trial, "bob")
    assert await workflow_runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "bob: expired"


@pytest.mark.anyio
async def test_the_clock_moves(durable_sqlite_store, workflow_runner):
    assert await durable_sqlite_store.list_workflows() == []  # not the other test's
    client = DurableClient(durable_sqlite_store)
    handle = await client.start_workflow(trial, "ann")
    await workflow_runner.run_once(handle)
    workflow_runner.clock.advance(timedelta(days=3))
    await workflow_runner.run_once(handle)
    assert (await handle.info()).waiting_for == "message:upgrade"
    await client.send(handle.id, "card", topic="upgrade")
    await workflow_runner.run_until_complete(handle)
    assert await handle.output() == "ann: upgraded"


@pytest.mark.anyio
async def test_a_wrong_expectation_fails(durable_sqlite_store, workflow_runner):
    handle = await DurableClient(durable_sqlite_store).start_workflow(trial, "cy")
    await workflow_runner.run_until_complete(handle)
    assert await handle.output() == "cy: upgraded"
"""

WORKER_TESTS = """
import os

import pytest
from durable_core import DurableClient

from user_workflows import where_am_i


@pytest.mark.anyio
async def test_a_real_worker_runs_it(durable_postgres_store, durable_worker):
    assert durable_worker.running()
    with open("worker.pid", "w") as out:
        out.write(str(durable_worker.process.pid))
    handle = await DurableClient(durable_postgres_store).start_workflow(where_am_i)
    await handle.wait_with_timeout(20)
    pid, flag = await handle.output()
    assert pid == durable_worker.process.pid != os.getpid()
    assert flag == "from durable_worker_env"
"""

WORKER_CONFTEST = """
import pytest


@pytest.fixture
def durable_worker_env():
    return {"USER_FLAG": "from durable_worker_env"}
"""

NEEDS_A_WORKER = """
def test_needs_a_worker(durable_worker):
    pass
"""


@pytest.fixture(scope="module")
async def user_postgres_url(anyio_backend: str) -> AsyncIterator[str]:
    """A database of its own for the user's tests (the plugin empties it)."""
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await fresh_postgres_database(POSTGRES_URL, f"{base}_pytest_plugin")
    try:
        yield url
    finally:
        await drop_postgres_database(url)


@pytest.fixture
def user_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's environment names no database and no app."""
    for name in ("DURABLE_POSTGRES_URL", "DURABLE_APP", "DURABLE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


ANYIO_ON_ASYNCIO = """
import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
"""
"""What docs/tutorials/testing.md tells a user whose environment has trio too (selenium
brings it here)."""


def run(pytester: pytest.Pytester, *args: str, conftest: str = "") -> pytest.RunResult:
    """Run pytest on the user's folder, with their conftest pinning anyio to asyncio."""
    pytester.makeconftest(ANYIO_ON_ASYNCIO + conftest)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=120)


def test_importing_the_plugin_loads_no_backend() -> None:
    """Its entry point loads in every test run of every user: it must stay light."""
    code = (
        "import sys, durable_core.pytest_plugin\n"
        "heavy = ('durable_sqlite', 'durable_postgres', 'asyncpg', 'aiosqlite', 'fastapi')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_run_that_uses_no_fixture_sets_none_up(pytester: pytest.Pytester, user_env: None) -> None:
    pytester.makepyfile(
        test_plain="""
        import pytest

        def test_sync():
            assert 1 + 1 == 2

        @pytest.mark.anyio
        async def test_async():
            assert True
        """
    )
    result = run(pytester, "--setup-show")
    result.assert_outcomes(passed=2)
    assert "durable_" not in result.stdout.str()
    listing = run(pytester, "--fixtures")
    for name in (
        "durable_sqlite_store",
        "workflow_runner",
        "durable_memory_store",
        "durable_worker",
    ):
        listing.stdout.fnmatch_lines([f"{name}*"])


def test_sqlite_store_and_runner_in_a_users_tests(
    pytester: pytest.Pytester, user_env: None
) -> None:
    pytester.makepyfile(user_workflows=USER_WORKFLOWS, test_trial=SQLITE_TESTS)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_a_wrong_expectation_fails*FAILED*", "*cy: expired*"])


MEMORY_TESTS = """
import pytest
from durable_core import DurableClient, WorkflowStatus
from durable_core.testing import WorkflowRunner

from user_workflows import trial


@pytest.mark.anyio
async def test_on_a_memory_store(durable_memory_store):
    assert await durable_memory_store.list_workflows() == []  # a fresh store
    handle = await DurableClient(durable_memory_store).start_workflow(trial, "dee")
    runner = WorkflowRunner(durable_memory_store)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "dee: expired"


@pytest.mark.anyio
async def test_each_gets_its_own(durable_memory_store):
    assert await durable_memory_store.list_workflows() == []
"""


def test_a_memory_store_in_a_users_tests(pytester: pytest.Pytester, user_env: None) -> None:
    pytester.makepyfile(user_workflows=USER_WORKFLOWS, test_memory=MEMORY_TESTS)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=2)


def test_a_worker_without_a_url_fails_and_says_how_to_give_one(
    pytester: pytest.Pytester, user_env: None
) -> None:
    pytester.makepyfile(test_worker=NEEDS_A_WORKER)
    result = run(pytester, "--durable-app", "user_workflows")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--durable-postgres-url or set DURABLE_POSTGRES_URL*"])


def test_a_worker_without_an_app_fails_and_says_how_to_name_one(
    pytester: pytest.Pytester, user_env: None, user_postgres_url: str
) -> None:
    pytester.makepyfile(test_worker=NEEDS_A_WORKER)
    result = run(pytester, "--durable-postgres-url", user_postgres_url)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--durable-app myapp.workflows*durable_worker_app fixture*"])


def test_a_worker_that_cannot_boot_fails_the_test_with_its_log(
    pytester: pytest.Pytester, user_env: None, user_postgres_url: str
) -> None:
    pytester.makepyfile(test_worker=NEEDS_A_WORKER, broken_app="import no_such_module\n")
    result = run(pytester, "--durable-postgres-url", user_postgres_url, "--durable-app=broken_app")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*the worker exited with 2 before it started*", "*cannot import workflow module*"]
    )


def test_a_real_worker_from_the_env_and_ini_runs_and_is_stopped(
    pytester: pytest.Pytester,
    user_env: None,
    user_postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DURABLE_POSTGRES_URL", user_postgres_url)
    pytester.makeini("[pytest]\ndurable_app = user_workflows\n")
    pytester.makepyfile(user_workflows=USER_WORKFLOWS, test_worker=WORKER_TESTS)
    result = run(pytester, conftest=WORKER_CONFTEST)
    result.assert_outcomes(passed=1)
    pid = int((pytester.path / "worker.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped, and reaped, at teardown
