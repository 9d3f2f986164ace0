"""The pytest plugin for testing your workflows (entry point ``durable_core``).

It defines fixtures and options, nothing autouse: a test run that asks for
none of them is unchanged. A conftest fixture of the same name overrides one.

- ``durable_sqlite_store``: a fresh SQLite database in ``tmp_path``, schema applied (a
  copy of one the session migrated once).
- ``workflow_runner``: a :class:`~durable_core.testing.WorkflowRunner` on it, with
  its test clock (``workflow_runner.clock``).
- ``durable_memory_store``: a fresh :class:`~durable_core.testing.MemoryStore` (no
  database: the fastest; ``WorkflowRunner(durable_memory_store)`` runs its workflows).
- ``durable_postgres_url``: ``--durable-postgres-url`` or ``$DURABLE_POSTGRES_URL``;
  a test that needs it fails when neither is set.
- ``durable_postgres_store``: a store on that database, migrated, its workflows deleted.
- ``durable_worker``: a real ``durable worker`` process on that database running
  ``durable_worker_app`` (``--durable-app``, the ``durable_app`` ini option or
  ``$DURABLE_APP``) with ``durable_worker_env`` added to its environment,
  stopped when the test ends.

The async fixtures run on anyio's pytest plugin; mark async tests ``@pytest.mark.anyio``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .caller.backends import store_from_url

if TYPE_CHECKING:
    from .runtime.worker_process import WorkerProcess
    from .seams.store import Store
    from .testing import WorkflowRunner

POSTGRES_URL_ENV = "DURABLE_POSTGRES_URL"
APP_ENV = "DURABLE_APP"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("durable", "durable-core workflows")
    group.addoption(
        "--durable-postgres-url",
        dest="durable_postgres_url",
        help=f"PostgreSQL for the durable_worker fixture (default: ${POSTGRES_URL_ENV}); "
        "its workflows are deleted before each test that uses it",
    )
    group.addoption(
        "--durable-app",
        dest="durable_app",
        action="append",
        help="module defining your workflows, for the durable_worker fixture (repeatable)",
    )
    parser.addini("durable_app", type="args", help="modules the durable_worker fixture runs")


def _require(fixture: str, backend: str) -> None:
    """Fail the test in one line naming the extra to install when ``backend``'s driver is
    missing (instead of a ``ModuleNotFoundError`` from deep in the driver's import)."""
    from .caller.backends import Driver
    from .errors import ConfigurationError

    driver: Driver = importlib.import_module(f"{backend}.plugin").DRIVER
    try:
        driver.require()
    except ConfigurationError as exc:
        missing = str(exc)
    else:
        return
    pytest.fail(f"the {fixture} fixture: {missing}", pytrace=False)


@pytest.fixture
async def durable_sqlite_store(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, anyio_backend: object
) -> AsyncIterator[Store]:
    """A fresh SQLite database (``durable.db`` in ``tmp_path``) with the schema applied: a
    copy of one the session migrated once. Needs the ``[sqlite]`` extra."""
    _require("durable_sqlite_store", "durable_sqlite")
    path = tmp_path / "durable.db"
    shutil.copyfile(await _migrated_sqlite(tmp_path_factory), path)
    async with _opened(f"sqlite:///{path}") as store:
        await store.apply_schema()  # checks the copy's version
        yield store


@pytest.fixture
def durable_memory_store() -> Store:
    """A fresh :class:`~durable_core.testing.MemoryStore`: the fastest store, in the test's
    memory (no database)."""
    from .testing import MemoryStore

    return MemoryStore()


@contextlib.asynccontextmanager
async def _opened(url: str) -> AsyncIterator[Store]:
    """The store for ``url``, from whichever installed backend accepts it, open until the
    block ends."""
    store = store_from_url(url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def _migrated_sqlite(factory: pytest.TempPathFactory) -> Path:
    """A SQLite database with the schema applied, made the first time a session asks (the
    schema is some sixty statements; a test's copy is one file)."""
    migrated = factory.getbasetemp() / "durable-migrated.db"
    if not migrated.exists():
        making = migrated.with_name("durable-migrating.db")
        making.unlink(missing_ok=True)
        async with _opened(f"sqlite:///{making}") as store:
            await store.apply_schema()
        making.rename(migrated)  # only whole: a failed migration leaves no copy to take
    return migrated


@pytest.fixture
async def workflow_runner(durable_sqlite_store: Store) -> AsyncIterator[WorkflowRunner]:
    """Runs the workflows of ``durable_sqlite_store`` in the test; ``.clock`` is its time.
    Transaction steps run on that SQLite database (or their ``AppDatabase``, closed when the
    test ends)."""
    from .testing import WorkflowRunner

    yield WorkflowRunner(durable_sqlite_store)
    from .sql.app_database import close_app_databases

    await close_app_databases()


@pytest.fixture(scope="session")
def durable_postgres_url(pytestconfig: pytest.Config) -> str:
    """The test PostgreSQL URL: ``--durable-postgres-url`` or ``$DURABLE_POSTGRES_URL``."""
    url: str | None = pytestconfig.getoption("durable_postgres_url") or os.environ.get(
        POSTGRES_URL_ENV
    )
    if not url:
        pytest.fail(
            f"this test needs PostgreSQL: pass --durable-postgres-url or set {POSTGRES_URL_ENV} "
            "to a database for tests (its workflows are deleted)",
            pytrace=False,
        )
    return url


@pytest.fixture
async def durable_postgres_store(
    durable_postgres_url: str, anyio_backend: object
) -> AsyncIterator[Store]:
    """A store on the test PostgreSQL database, migrated and holding no workflows. Needs
    the ``[postgres]`` extra."""
    _require("durable_postgres_store", "durable_postgres")
    import sqlalchemy as sa

    from .sql.base import SQLStoreBase
    from .sql.schema import WORKFLOW_TABLES

    async with _opened(durable_postgres_url) as store:
        await store.apply_schema()
        if not isinstance(store, SQLStoreBase):
            pytest.fail(f"{durable_postgres_url!r} did not open a SQL store", pytrace=False)
        await store.connector.execute(sa.text(f"TRUNCATE {WORKFLOW_TABLES}"))
        yield store


@pytest.fixture
def durable_worker_app(pytestconfig: pytest.Config) -> list[str]:
    """The modules ``durable_worker`` imports: ``--durable-app``, ini ``durable_app`` or
    ``$DURABLE_APP`` (comma-separated)."""
    apps: list[str] = pytestconfig.getoption("durable_app") or pytestconfig.getini("durable_app")
    apps = apps or [name for name in os.environ.get(APP_ENV, "").split(",") if name]
    if not apps:
        pytest.fail(
            "durable_worker needs the modules that define your workflows: pass "
            f"--durable-app myapp.workflows, set durable_app in the pytest ini or {APP_ENV}, "
            "or override the durable_worker_app fixture",
            pytrace=False,
        )
    return apps


@pytest.fixture
def durable_worker_env() -> dict[str, str]:
    """Variables the worker gets on top of the test process's environment (none)."""
    return {}


@pytest.fixture
def durable_worker(
    durable_postgres_url: str,
    durable_postgres_store: Store,
    durable_worker_app: list[str],
    durable_worker_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerProcess]:
    """A ``durable worker`` process on ``durable_postgres_store``'s database; it has
    started claiming when the test begins, and is stopped (SIGTERM) when it ends."""
    from .errors import WorkerStartError
    from .runtime.worker_process import WorkerProcess

    log_path = tmp_path_factory.mktemp("durable-worker") / "worker.log"
    worker = WorkerProcess(
        durable_postgres_url, durable_worker_app, log_path=log_path, env=durable_worker_env
    )
    try:
        worker.start()
    except WorkerStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield worker
    finally:
        died = not worker.running()
        code = worker.stop()
        if died:
            pytest.fail(
                f"the durable worker died during the test (exit {code}):\n{worker.log()[-4000:]}",
                pytrace=False,
            )
