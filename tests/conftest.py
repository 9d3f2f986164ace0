"""Shared fixtures. Tests talk to real databases; an unreachable one fails the run."""

from __future__ import annotations

import inspect
import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from durable_core.pytest_plugin import _migrated_sqlite
from durable_core.seams.store import Store
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_core.testing import MemoryStore
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore


def _per_process(url: str) -> str:
    """``url`` with its database named after this pytest-xdist worker (``durable_test_gw1``),
    so test processes running side by side never share a database."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    return re.sub(r"/([^/?]+)(\?|$)", lambda m: f"/{m.group(1)}_{worker}{m.group(2)}", url, count=1)


POSTGRES_URL = _per_process(
    os.environ.get("DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/durable_test")
)
pytest_plugins = ["tests.side_effects"]

MYSQL_URL = _per_process(
    os.environ.get("DURABLE_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/durable_test")
)


def scratch_name(name: str) -> str:
    """The name of a test's extra database ``name``, made this test run's own: suffixed with
    the test database's name when that is not the default (a pytest-xdist worker's, or
    another checkout's run on the same servers), so runs side by side never drop each
    other's databases."""
    stem = re.sub(r"[?].*$", "", POSTGRES_URL).rsplit("/", 1)[1]
    return name if stem == "durable_test" else f"{name}_{stem}"[:63]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


async def _fresh_store(
    request: pytest.FixtureRequest, tmp_path: Path, factory: pytest.TempPathFactory
) -> Store:
    """A fresh store of the kind ``request.param`` names, not yet open."""
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return SQLiteStore(await migrated_sqlite_url(tmp_path / "durable.db", factory))
    module = request.module.__name__.rsplit(".", 1)[-1]
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    return PostgresStore(await migrated_postgres_database(POSTGRES_URL, f"{base}_{module}"))


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
async def sqlite_or_postgres(
    request: pytest.FixtureRequest, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Store]:
    """An open store with the schema applied, on a fresh SQLite file (``durable.db`` in
    ``tmp_path``), on a fresh PostgreSQL database named after the test database and
    the test module, and in a fresh ``MemoryStore``."""
    store = await _fresh_store(request, tmp_path, tmp_path_factory)
    await store.open()
    await store.apply_schema()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
async def sql_store(
    request: pytest.FixtureRequest, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Store]:
    """``sqlite_or_postgres`` but the memory store, for tests that need a SQL database (a
    transaction step's own connection, a row written with SQL)."""
    store = await _fresh_store(request, tmp_path, tmp_path_factory)
    await store.open()
    await store.apply_schema()
    try:
        yield store
    finally:
        await store.close()


@dataclass
class Backend:
    """An open store and the URL of its database (to read it with plain SQL)."""

    store: Store
    url: str


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
async def any_backend(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mysql_url: str,
) -> AsyncIterator[Backend]:
    """An open store with the schema applied on each of the three backends: a fresh SQLite
    file, and a fresh PostgreSQL and MariaDB database named after the test module (so a
    test may read every table and find only its own rows)."""
    store: Store
    if request.param == "sqlite":
        url = await migrated_sqlite_url(tmp_path / "durable.db", tmp_path_factory)
        store = SQLiteStore(url)
    elif request.param == "postgresql":
        module = request.module.__name__.rsplit(".", 1)[-1]
        base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
        url = await migrated_postgres_database(POSTGRES_URL, f"{base}_{module}")
        store = PostgresStore(url)
    else:
        from durable_mysql import MySQLStore

        module = request.module.__name__.rsplit(".", 1)[-1]
        url = await empty_mysql_database(f"durable_{module}")
        store = MySQLStore(url)
    await store.open()
    if request.param == "mysql":
        await store.apply_schema()
    try:
        yield Backend(store, url)
    finally:
        await store.close()


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    """Mark every ``async def`` test for anyio, on the ``anyio_backend`` above, before its
    item is made: a test marked only afterwards is run once per installed backend (trio
    too, which selenium brings) by anyio's plugin, ignoring that fixture."""
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        pytest.mark.anyio(obj)
        pytest.mark.usefixtures("anyio_backend")(obj)


@pytest.fixture
async def sqlite_store(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SQLiteStore]:
    """A fresh SQLite file with the schema applied."""
    store = SQLiteStore(await migrated_sqlite_url(tmp_path / "durable.db", tmp_path_factory))
    await store.open()
    await store.apply_schema()
    try:
        yield store
    finally:
        await store.close()


def _split_database(url: str) -> tuple[str, str]:
    match = re.match(r"^(.*/)([^/?]+)(\?.*)?$", url)
    if not match:
        raise RuntimeError(f"test database URL {url!r} names no database")
    return match.group(2), match.group(1) + "postgres" + (match.group(3) or "")


@pytest.fixture(scope="session")
async def postgres_url() -> str:
    """The test PostgreSQL database, made afresh for the session (so no table of an earlier
    run, or of an unreleased schema, survives into it). Unreachable means failure, not skip."""
    import asyncpg

    name, admin_url = _split_database(POSTGRES_URL)
    plain_admin = admin_url.replace("postgresql+asyncpg://", "postgresql://")
    try:
        conn = await asyncpg.connect(plain_admin, timeout=10)
    except Exception as exc:
        pytest.fail(f"PostgreSQL is required at {POSTGRES_URL} and cannot be reached: {exc}")
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return POSTGRES_URL


@pytest.fixture(scope="session")
async def mysql_url() -> str:
    """The MariaDB/MySQL test database, created and given a fresh schema once per session.

    An unreachable server fails the run; it is never skipped.
    """
    from durable_core.errors import StoreUnavailableError
    from durable_core.sql import schema
    from durable_mysql import MySQLStore, ensure_database

    try:
        await ensure_database(MYSQL_URL)
    except StoreUnavailableError as exc:
        pytest.fail(f"MariaDB/MySQL is required at {MYSQL_URL} and cannot be reached: {exc}")
    store = MySQLStore(MYSQL_URL)
    await store.open()
    try:
        await schema.drop_schema(store.engine)
        await store.apply_schema()
    finally:
        await store.close()
    return MYSQL_URL


async def fresh_postgres_database(
    postgres_url: str, name: str, *, template: str | None = None
) -> str:
    """An empty PostgreSQL database ``name`` beside the test database (dropped first if there),
    or a copy of the database ``template``."""
    import asyncpg

    base = postgres_url.replace("postgresql+asyncpg://", "postgresql://").rsplit("/", 1)[0]
    name = scratch_name(name)
    copy = "" if template is None else f' TEMPLATE "{template}"'
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"{copy}')
    finally:
        await admin.close()
    return f"{base}/{name}"


_TEMPLATES: dict[str, str] = {}
"""Per backend, the database this process migrated once, which fresh migrated ones copy
(SQLite's is the pytest plugin's)."""


async def _apply_schema(url: str) -> None:
    from durable_core import open_store

    store = await open_store(url)
    try:
        await store.apply_schema()
    finally:
        await store.close()


async def migrated_sqlite_url(path: Path, factory: pytest.TempPathFactory) -> str:
    """The URL of a new SQLite file at ``path`` with the schema applied: a copy of the one
    the session migrated for the pytest plugin's ``durable_sqlite_store``, so a test pays
    for a file copy instead of the schema's statements."""
    shutil.copyfile(await _migrated_sqlite(factory), path)
    return f"sqlite:///{path}"


async def migrated_postgres_database(postgres_url: str, name: str) -> str:
    """A new PostgreSQL database ``name`` beside the test database, with the schema applied:
    made by ``CREATE DATABASE ... TEMPLATE`` from one this process migrated."""
    template = _TEMPLATES.get("postgresql")
    if template is None:
        stem = postgres_url.rsplit("/", 1)[1].split("?")[0]
        template = await fresh_postgres_database(postgres_url, f"{stem}_template")
        await _apply_schema(template)
        _TEMPLATES["postgresql"] = template
    return await fresh_postgres_database(postgres_url, name, template=template.rsplit("/", 1)[1])


async def drop_postgres_database(url: str) -> None:
    """Drop the database ``url`` names."""
    import asyncpg

    base, name = url.rsplit("/", 1)
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def empty_mysql_database(name: str) -> str:
    """The MariaDB/MySQL database ``name`` beside the test database, with no durable tables."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    from durable_mysql import ensure_database

    url = MYSQL_URL.rsplit("/", 1)[0] + f"/{scratch_name(name)}"
    await ensure_database(url)
    engine = create_async_engine(url.replace("mysql://", "mysql+aiomysql://", 1))
    try:
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(f"DROP TABLE IF EXISTS {WORKFLOW_TABLES}, durable_schema_versions")
            )
    finally:
        await engine.dispose()
    return url
