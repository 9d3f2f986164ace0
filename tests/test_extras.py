"""The first steps with one backend's extra installed: each works, or names the extra it needs.

The wheel and the sdist are built once per run (``python -m build``, from a copy of this
checkout) and the wheel is installed three times, each into a fresh virtual environment
with ``pip install 'durable_core-*.whl[EXTRA]' pytest`` from this machine's package index,
as ``make install`` installs. Then the steps a new user takes run in it, in an empty folder:
README's first example, each store's constructor and ``open_store``, the pytest plugin's
fixtures, ``durable migrate`` and ``durable worker``. A step whose backend is installed
works against a real database; any other ends with the one line that names the extra to
install, never a ``ModuleNotFoundError`` from inside a driver's import.

Under pytest-xdist the processes share one build (the first to come builds it, under a
file lock, and the others wait for it).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import (
    MYSQL_URL,
    POSTGRES_URL,
    drop_postgres_database,
    empty_mysql_database,
    fresh_postgres_database,
)
from tests.test_readme import README, parse

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("postgres", "sqlite", "mysql")
DRIVER = {"postgres": "asyncpg", "sqlite": "aiosqlite", "mysql": "aiomysql"}
NEEDS = {
    "postgres": "PostgreSQL needs the asyncpg driver, which is not installed: "
    "pip install 'durable-core[postgres]'",
    "sqlite": "SQLite needs the aiosqlite driver, which is not installed: "
    "pip install 'durable-core[sqlite]'",
    "mysql": "MySQL/MariaDB needs the aiomysql driver, which is not installed: "
    "pip install 'durable-core[mysql]'",
}
"""What a step on each backend says where that backend's extra is not installed."""
STORE = {
    "postgres": "from durable_postgres import PostgresStore as Store",
    "sqlite": "from durable_sqlite import SQLiteStore as Store",
    "mysql": "from durable_mysql import MySQLStore as Store",
}
HANG_GUARD = 600
_NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "site", ".durable", "__pycache__", "*.egg-info", "build", "dist",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", "results", "*.db",
)  # fmt: skip


def _shared_root(factory: pytest.TempPathFactory) -> Path:
    """A folder all the processes of this run share (pytest-xdist's workers each have a
    base temp folder of their own, under the run's)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _build(root: Path) -> tuple[Path, Path]:
    """Build the sdist and the wheel from a copy of this checkout; ``(wheel, sdist)``."""
    source = root / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_COPIED)
    out = root / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=HANG_GUARD,
    )
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return wheel, sdist


def _install(path: Path, wheel: Path, extra: str) -> Path:
    """A fresh venv holding the wheel with ``extra`` and pytest; returns its python."""
    venv.create(path, with_pip=True)
    python = path / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"{wheel}[{extra}]", "pytest"],
        check=True,
        capture_output=True,
        timeout=HANG_GUARD,
        env=_clean_env(),
    )
    return python


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The built ``wheel`` and ``sdist``, and a python per extra (``postgres``, ...)."""
    root = _shared_root(tmp_path_factory) / "durable-release"
    root.mkdir(exist_ok=True)
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "done"
        if not done.exists():
            wheel, sdist = _build(root)
            with ThreadPoolExecutor(max_workers=len(EXTRAS)) as pool:
                futures = {e: pool.submit(_install, root / e, wheel, e) for e in EXTRAS}
                [future.result() for future in futures.values()]
            done.write_text(f"{wheel}\n{sdist}\n")
        wheel_text, sdist_text = done.read_text().split()
    built = {"wheel": Path(wheel_text), "sdist": Path(sdist_text)}
    return built | {extra: root / extra / "bin" / "python" for extra in EXTRAS}


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DURABLE_"))}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    return env | extra


def run(python: Path, code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script in ``cwd`` with the venv's python."""
    script = cwd / "step.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    return command([str(python), str(script)], cwd, **env)


def command(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, cwd=cwd, env=_clean_env(**env), timeout=HANG_GUARD
    )


def durable(python: Path) -> str:
    """The venv's ``durable`` console script."""
    return str(python.parent / "durable")


@pytest.fixture
def urls(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """A URL per backend, each an empty database of this test's own."""
    tag = "".join(c if c.isalnum() else "_" for c in request.node.name)[-30:].lower()
    postgres = asyncio.run(fresh_postgres_database(POSTGRES_URL, f"extras_{tag}"))
    mysql = asyncio.run(empty_mysql_database(f"extras_{tag}"))
    assert MYSQL_URL.rsplit("/", 1)[0] in mysql
    yield {"postgres": postgres, "sqlite": f"sqlite:///{tmp_path / 'first.db'}", "mysql": mysql}
    asyncio.run(drop_postgres_database(postgres))


def _no_raw_import_error(done: subprocess.CompletedProcess[str]) -> None:
    output = done.stdout + done.stderr
    assert "ModuleNotFoundError" not in output and "No module named" not in output, output


@pytest.mark.parametrize("extra", EXTRAS)
def test_the_venv_holds_its_extra_and_no_other(
    release: dict[str, Path], extra: str, tmp_path: Path
) -> None:
    done = run(
        release[extra],
        """
        import importlib.util, durable_core
        print(durable_core.__version__)
        print(*(bool(importlib.util.find_spec(m)) for m in ("asyncpg", "aiosqlite", "aiomysql")))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    version, found = done.stdout.splitlines()
    assert release["wheel"].name.startswith(f"durable_core-{version}-")
    assert found.split() == [str(DRIVER[e] == DRIVER[extra]) for e in EXTRAS]


def test_the_wheel_and_the_sdist_carry_the_license(release: dict[str, Path]) -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License")
    with zipfile.ZipFile(release["wheel"]) as wheel:
        [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert wheel.read(name).decode() == license_text
    with tarfile.open(release["sdist"]) as sdist:
        [member] = [m for m in sdist.getmembers() if m.name.count("/") == 1 and
                    m.name.endswith("/LICENSE")]  # fmt: skip
        handle = sdist.extractfile(member)
        assert handle is not None and handle.read().decode() == license_text


@pytest.mark.parametrize("extra", EXTRAS)
def test_readmes_first_example(release: dict[str, Path], extra: str, tmp_path: Path) -> None:
    """Runs with ``[sqlite]``; elsewhere its last line names the extra it needs."""
    first = next(block for block in parse(README.read_text("utf-8")) if block.language == "python")
    done = run(release[extra], first.code, tmp_path)
    _no_raw_import_error(done)
    if extra == "sqlite":
        assert done.returncode == 0, done.stderr
        assert done.stdout == "Welcome, user:123!\n"
    else:
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert last == f"durable_core.errors.ConfigurationError: {NEEDS['sqlite']}"


@pytest.mark.parametrize("backend", EXTRAS)
@pytest.mark.parametrize("extra", EXTRAS)
def test_each_store_opens_or_names_its_extra(
    release: dict[str, Path], extra: str, backend: str, urls: dict[str, str], tmp_path: Path
) -> None:
    """The store's class (``PostgresStore(url)``, ...) and ``open_store(url)`` each apply
    the schema and start a workflow, or raise ``ConfigurationError`` naming the extra."""
    done = run(
        release[extra],
        f"""
        import asyncio

        from durable_core import ConfigurationError, DurableClient, open_store, workflow


        @workflow
        async def hello(name: str) -> str:
            return f"hello {{name}}"


        async def started(store) -> str:
            await store.apply_schema()
            handle = await DurableClient(store).start_workflow(hello, "ann")
            return (await handle.status()).value


        async def by_class() -> str:
            {STORE[backend]}

            async with Store({urls[backend]!r}) as store:
                return await started(store)


        async def by_url() -> str:
            store = await open_store({urls[backend]!r})
            try:
                return await started(store)
            finally:
                await store.close()


        for step in (by_class, by_url):
            try:
                print(step.__name__, asyncio.run(step()))
            except ConfigurationError as exc:
                print(step.__name__, "ConfigurationError:", exc)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    _no_raw_import_error(done)
    outcome = "pending" if backend == extra else f"ConfigurationError: {NEEDS[backend]}"
    assert done.stdout.splitlines() == [f"by_class {outcome}", f"by_url {outcome}"]


FIXTURE_TESTS = """
import pytest

from durable_core import DurableClient, WorkflowStatus, workflow


@pytest.fixture
def anyio_backend():
    return "asyncio"


@workflow
async def hello(name: str) -> str:
    return f"hello {name}"


@pytest.mark.anyio
async def test_sqlite(durable_sqlite_store, workflow_runner):
    handle = await DurableClient(durable_sqlite_store).start_workflow(hello, "ann")
    assert await workflow_runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED


@pytest.mark.anyio
async def test_postgres(durable_postgres_store):
    handle = await DurableClient(durable_postgres_store).start_workflow(hello, "ann")
    assert await handle.status() is WorkflowStatus.PENDING
"""


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
@pytest.mark.parametrize("extra", EXTRAS)
def test_the_pytest_fixtures_run_or_name_their_extra(
    release: dict[str, Path], extra: str, backend: str, urls: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "test_first.py").write_text(FIXTURE_TESTS, encoding="utf-8")
    done = command(
        [str(release[extra]), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"test_first.py::test_{backend}"],
        tmp_path,
        DURABLE_POSTGRES_URL=urls["postgres"],
    )  # fmt: skip
    _no_raw_import_error(done)
    if backend == extra:
        assert done.returncode == 0, done.stdout
        assert "1 passed" in done.stdout
    else:
        assert done.returncode == 1, done.stdout
        fixture = f"durable_{backend}_store"
        lines = done.stdout.splitlines()
        assert f"the {fixture} fixture: {NEEDS[backend]}" in lines, done.stdout
        assert "During handling" not in done.stdout and "1 error" in done.stdout


@pytest.mark.parametrize("backend", EXTRAS)
@pytest.mark.parametrize("extra", EXTRAS)
def test_durable_migrate_runs_or_names_the_extra(
    release: dict[str, Path], extra: str, backend: str, urls: dict[str, str], tmp_path: Path
) -> None:
    done = command([durable(release[extra]), "migrate", "--database-url", urls[backend]], tmp_path)
    if backend == extra:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 2
        assert done.stderr.splitlines() == [f"durable: error: {NEEDS[backend]}"]


WORKFLOWS = """
from durable_core import workflow, workflow_step


@workflow_step
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow
async def hello(name: str) -> str:
    return await greet(name)
"""

START = """
import asyncio

from durable_core import DurableClient, open_store
from wf import hello


async def main() -> None:
    store = await open_store()
    try:
        handle = await DurableClient(store).start_workflow(hello, "ann")
        print((await handle.wait_with_timeout(300)).value, await handle.output())
    finally:
        await store.close()


asyncio.run(main())
"""


@pytest.mark.parametrize("extra", EXTRAS)
def test_durable_worker_runs_workflows_on_postgres_or_says_what_it_needs(
    release: dict[str, Path], extra: str, urls: dict[str, str], tmp_path: Path
) -> None:
    """With ``[postgres]`` a worker runs a workflow a script started; with another extra,
    the worker on its own backend says it needs PostgreSQL, and on PostgreSQL names the
    extra."""
    (tmp_path / "wf.py").write_text(WORKFLOWS, encoding="utf-8")
    worker = [durable(release[extra]), "worker", "--app", "wf", "--database-url"]
    if extra != "postgres":
        done = command([*worker, urls["postgres"]], tmp_path)
        assert (done.returncode, done.stderr.splitlines()) == (
            2,
            [f"durable: error: {NEEDS['postgres']}"],
        )
        assert command([durable(release[extra]), "migrate", "--database-url", urls[extra]],
                       tmp_path).returncode == 0  # fmt: skip
        done = command([*worker, urls[extra]], tmp_path)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        assert "cannot claim workflows: the worker needs PostgreSQL" in line
        assert "durable worker --embedded" in line
        return
    url = urls["postgres"]
    assert command([durable(release[extra]), "migrate", "--database-url", url],
                   tmp_path).returncode == 0  # fmt: skip
    process = subprocess.Popen(
        [*worker, url], cwd=tmp_path, env=_clean_env(), stderr=subprocess.PIPE, text=True
    )
    try:
        started = run(release[extra], START, tmp_path, DURABLE_DATABASE_URL=url)
        assert started.returncode == 0, started.stderr
        assert started.stdout == "succeeded hello ann\n"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, stderr


def test_without_the_dashboard_extra_the_command_names_it(
    release: dict[str, Path], tmp_path: Path
) -> None:
    done = command(
        [durable(release["postgres"]), "dashboard", "--database-url", "sqlite:///x"], tmp_path
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "durable: error: the dashboard needs starlette, uvicorn, jinja2: "
        "pip install 'durable-core[dashboard]'"
    ]


def test_without_the_crypto_extra_encryption_keys_name_it(
    release: dict[str, Path], tmp_path: Path
) -> None:
    done = command(
        [durable(release["postgres"]), "list", "--database-url", "sqlite:///x.db"],
        tmp_path,
        DURABLE_ENCRYPTION_KEYS="A=" + "A" * 43 + "=",
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "durable: error: the encrypting codec needs cryptography, which is not installed: "
        "pip install 'durable-core[crypto]'"
    ]


def test_with_only_sqlite_nothing_is_logged_and_the_url_forms_are_sqlites(
    release: dict[str, Path], tmp_path: Path
) -> None:
    done = run(
        release["sqlite"],
        """
        import logging
        logging.basicConfig(level=logging.WARNING)
        from durable_core.caller.backends import url_forms
        print(url_forms())
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "no plugin failure is logged for a backend that is not installed"
    # A backend whose driver is missing is left out of the URL forms, and named only
    # when a URL asks for it.
    assert "sqlite:///relative/path.db" in done.stdout and "postgresql" not in done.stdout


def test_without_the_otel_extra_durable_core_otel_names_it(
    release: dict[str, Path], tmp_path: Path
) -> None:
    done = run(
        release["sqlite"],
        """
        from durable_core import ConfigurationError
        try:
            import durable_core.observers.otel
        except ConfigurationError as exc:
            print("ConfigurationError:", exc)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "ConfigurationError: durable_core.observers.otel needs OpenTelemetry, which is not "
        "installed (opentelemetry): pip install 'durable-core[otel]'"
    )
