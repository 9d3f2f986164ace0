"""Both schema routes give identical schema.

Route (a) is programmatic: ``await store.apply_schema()``. Route (b) writes the
Alembic revision with :func:`durable_core.migrations.write_revision` into a fresh
Alembic environment and runs ``upgrade head``. The two databases are compared by
reflection: tables, columns (name, type, nullable, default), primary keys, foreign
keys and indexes.

The helpers take database URLs so the same comparison runs on PostgreSQL and
MariaDB/MySQL::

    await apply_programmatically(url_a)
    await alembic_upgrade(url_b, tmp_path / "alembic")
    await assert_same_schema(url_a, url_b)

A URL may name an async driver (``sqlite+aiosqlite``, ``postgresql+asyncpg``,
``mysql+aiomysql``) or a sync one; reflection and the generated ``env.py`` use
whichever kind the URL names, and plain ``postgresql://`` / ``mysql://`` /
``mariadb://`` URLs get the async driver.
"""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import create_async_engine

import durable_core
from durable_core import ConfigurationError, schema
from durable_core.migrations import REVISION_SLUG, render_revision, write_revision

DURABLE_TABLES = ("workflow_steps", "workflows")

# -- reusable helpers ------------------------------------------------------------------------

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mariadb+aiomysql",
}


def async_url(url: str | sa.URL) -> sa.URL:
    """``url`` with an async driver (kept when it already names one)."""
    parsed = sa.make_url(url)
    if "+" in parsed.drivername:
        return parsed
    return parsed.set(drivername=_ASYNC_DRIVERS.get(parsed.drivername, parsed.drivername))


def _reflect(conn: sa.Connection) -> dict[str, Any]:
    inspector = sa.inspect(conn)
    tables: dict[str, Any] = {}
    for table in sorted(inspector.get_table_names()):
        if table == "alembic_version":
            continue
        columns = [
            (
                column["name"],
                str(column["type"]),
                column["nullable"],
                None if column.get("default") is None else str(column["default"]),
            )
            for column in inspector.get_columns(table)
        ]
        pk = inspector.get_pk_constraint(table)
        foreign_keys = sorted(
            (
                fk.get("name"),
                tuple(fk["constrained_columns"]),
                fk["referred_table"],
                tuple(fk["referred_columns"]),
                tuple(sorted((fk.get("options") or {}).items())),
            )
            for fk in inspector.get_foreign_keys(table)
        )
        indexes = sorted(
            (index["name"], tuple(index["column_names"]), bool(index["unique"]))
            for index in inspector.get_indexes(table)
        )
        uniques = sorted(
            (u.get("name"), tuple(u["column_names"]))
            for u in inspector.get_unique_constraints(table)
        )
        options = inspector.get_table_options(table)
        tables[table] = {
            "options": tuple(sorted((k, str(v)) for k, v in options.items())),
            "columns": columns,
            "primary_key": tuple(pk["constrained_columns"]),
            "foreign_keys": foreign_keys,
            "indexes": indexes,
            "unique_constraints": uniques,
        }
    return tables


async def schema_snapshot(url: str | sa.URL) -> dict[str, Any]:
    """The reflected schema of every table but ``alembic_version``."""
    engine = create_async_engine(async_url(url))
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_reflect)
    finally:
        await engine.dispose()


async def assert_same_schema(url_a: str | sa.URL, url_b: str | sa.URL) -> dict[str, Any]:
    """Assert that two databases hold the same durable schema; return it."""
    a = await schema_snapshot(url_a)
    b = await schema_snapshot(url_b)
    assert set(DURABLE_TABLES) <= set(a), f"durable tables missing from {url_a}: {sorted(a)}"
    for table in sorted(set(a) | set(b)):
        assert table in a and table in b, f"table {table} is in only one database"
        for aspect in a[table]:
            assert a[table][aspect] == b[table][aspect], (
                f"{table}.{aspect} differs:\n  {url_a}: {a[table][aspect]}\n"
                f"  {url_b}: {b[table][aspect]}"
            )
    assert a == b
    return a


async def apply_programmatically(url: str) -> None:
    """Route (a): the installed backend's ``store.apply_schema()``."""
    store = durable_core.store_from_url(url)
    await store.open()
    try:
        await store.apply_schema()
    finally:
        await store.close()


ENV_PY = '''
"""A minimal Alembic env.py: sync URLs run directly, async URLs through run_sync."""

import asyncio

import sqlalchemy as sa
from alembic import context
from sqlalchemy.ext.asyncio import create_async_engine

URL = context.config.get_main_option("sqlalchemy.url")
ASYNC_DRIVERS = ("aiosqlite", "asyncpg", "aiomysql")


def migrate(connection):
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()


async def migrate_async():
    engine = create_async_engine(URL, poolclass=sa.pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(migrate)
    await engine.dispose()


if sa.make_url(URL).get_driver_name() in ASYNC_DRIVERS:
    asyncio.run(migrate_async())
else:
    engine = sa.create_engine(URL, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        migrate(connection)
    engine.dispose()
'''


def alembic_config(url: str, workdir: Path) -> Config:
    """A fresh Alembic environment in ``workdir`` with durable-core's revision written."""
    versions = workdir / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    (workdir / "env.py").write_text(textwrap.dedent(ENV_PY), encoding="utf-8")
    if not list(versions.glob(f"*_{REVISION_SLUG}.py")):
        write_revision(versions)
    config = Config()
    config.set_main_option("script_location", str(workdir))
    config.set_main_option("sqlalchemy.url", str(url).replace("%", "%%"))
    return config


async def alembic_upgrade(url: str, workdir: Path) -> Config:
    """Route (b): ``alembic upgrade head`` with the written revision.

    Alembic's commands are synchronous (and an async ``env.py`` starts its own event
    loop), so they run in a worker thread.
    """
    config = alembic_config(url, workdir)
    await anyio.to_thread.run_sync(command.upgrade, config, "head")
    return config


async def alembic_downgrade(config: Config, target: str = "base") -> None:
    """``alembic downgrade <target>`` in a worker thread."""
    await anyio.to_thread.run_sync(command.downgrade, config, target)


def sqlite_tables(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


def sqlite_ddl(path: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name != 'alembic_version' "
            "AND sql IS NOT NULL ORDER BY type, name"
        ).fetchall()
    finally:
        conn.close()
    return [(t, n, " ".join(s.split())) for t, n, s in rows]


# -- tests -----------------------------------------------------------------------------------


async def test_apply_schema_and_alembic_upgrade_give_identical_schema(tmp_path: Path) -> None:
    programmatic = tmp_path / "programmatic.db"
    migrated = tmp_path / "migrated.db"
    await apply_programmatically(f"sqlite:///{programmatic}")
    await alembic_upgrade(f"sqlite:///{migrated}", tmp_path / "alembic")

    reflected = await assert_same_schema(f"sqlite:///{programmatic}", f"sqlite:///{migrated}")
    assert sorted(reflected) == sorted(DURABLE_TABLES)
    # What the reflection saw is what durable_core.schema declares.
    for table in schema.metadata.sorted_tables:
        got = reflected[table.name]
        assert [c[0] for c in got["columns"]] == [c.name for c in table.columns]
        assert [c[2] for c in got["columns"]] == [c.nullable for c in table.columns]
        assert got["primary_key"] == tuple(c.name for c in table.primary_key.columns)
        assert {i[0] for i in got["indexes"]} == {str(i.name) for i in table.indexes}
    steps = reflected["workflow_steps"]
    assert steps["primary_key"] == ("workflow_id", "step_index")
    assert steps["foreign_keys"] == [
        (
            "fk_workflow_steps_workflow_id",
            ("workflow_id",),
            "workflows",
            ("id",),
            (("ondelete", "CASCADE"),),
        )
    ]
    assert ("attempts", "INTEGER", False, "0") in reflected["workflows"]["columns"]
    assert ("attempts", "INTEGER", False, "1") in steps["columns"]
    # On SQLite the two routes even store the same DDL text.
    assert sqlite_ddl(programmatic) == sqlite_ddl(migrated)


async def test_alembic_downgrade_base_removes_the_tables(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    config = await alembic_upgrade(f"sqlite:///{migrated}", tmp_path / "alembic")
    assert set(DURABLE_TABLES) <= set(sqlite_tables(migrated))
    await alembic_downgrade(config, "base")
    assert sqlite_tables(migrated) == ["alembic_version"]
    # ... and upgrading again restores exactly the same schema.
    await anyio.to_thread.run_sync(command.upgrade, config, "head")
    programmatic = tmp_path / "programmatic.db"
    await apply_programmatically(f"sqlite:///{programmatic}")
    await assert_same_schema(f"sqlite:///{programmatic}", f"sqlite:///{migrated}")


async def test_alembic_schema_is_usable_by_the_store(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    await alembic_upgrade(f"sqlite+aiosqlite:///{migrated}", tmp_path / "alembic")
    store = durable_core.store_from_url(f"sqlite:///{migrated}")
    await store.open()
    try:
        assert await store.list_workflows() == []
        await store.apply_schema()  # idempotent over an Alembic-made schema
    finally:
        await store.close()


def test_write_revision_refuses_a_second_copy_and_a_missing_directory(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    path = write_revision(versions, revision="abc123", down_revision="prev")
    assert path.name == f"abc123_{REVISION_SLUG}.py"
    text = path.read_text(encoding="utf-8")
    assert "revision: str = 'abc123'" in text and "down_revision: str | None = 'prev'" in text
    assert "# ###" not in text
    compile(text, str(path), "exec")
    with pytest.raises(ConfigurationError, match="already exists"):
        write_revision(versions)
    with pytest.raises(ConfigurationError, match="does not exist"):
        write_revision(tmp_path / "nowhere")
    rendered = render_revision("r1", None)
    for table in DURABLE_TABLES:
        assert f"op.create_table('{table}'" in rendered and f"op.drop_table('{table}')" in rendered


# -- the same comparison on the server databases -----------------------------------------


def _async(url: str) -> str:
    return async_url(url).render_as_string(hide_password=False)


async def _fresh_postgres_database(postgres_url: str, name: str) -> str:
    import asyncpg

    base = postgres_url.rsplit("/", 1)[0]
    admin = await asyncpg.connect(f"{base}/postgres".replace("postgresql+asyncpg", "postgresql"))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return f"{base}/{name}"


async def test_both_routes_give_identical_schema_on_postgresql(
    postgres_url: str, tmp_path: Path
) -> None:
    url_a = await _fresh_postgres_database(postgres_url, "durable_routes_a")
    url_b = await _fresh_postgres_database(postgres_url, "durable_routes_b")
    await apply_programmatically(url_a)
    await alembic_upgrade(_async(url_b), tmp_path / "alembic")
    snapshot = await assert_same_schema(url_a, url_b)
    assert {"ix_workflows_status_run_at", "ix_workflows_status_locked_until"} <= {
        name for name, _columns, _unique in snapshot["workflows"]["indexes"]
    }


async def test_both_routes_give_identical_schema_on_mariadb(tmp_path: Path) -> None:
    from durable_mysql.store import ensure_database
    from tests.conftest import MYSQL_URL

    base = MYSQL_URL.rsplit("/", 1)[0]
    urls = []
    for name in ("durable_routes_a", "durable_routes_b"):
        url = f"{base}/{name}"
        await ensure_database(url)
        engine = create_async_engine(async_url(url))
        try:
            async with engine.begin() as conn:
                await conn.execute(sa.text("DROP TABLE IF EXISTS workflow_steps, workflows"))
                await conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
        finally:
            await engine.dispose()
        urls.append(url)
    await apply_programmatically(urls[0])
    await alembic_upgrade(_async(urls[1]), tmp_path / "alembic")
    await assert_same_schema(urls[0], urls[1])
