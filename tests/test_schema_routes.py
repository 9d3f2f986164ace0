"""Both schema routes give identical schema, at every schema version.

Route (a) is programmatic: ``await store.apply_schema()`` (or
:func:`durable_core.sql.migrations.upgrade` to a given version). Route (b) writes the
Alembic revisions with :func:`durable_core.sql.migrations.write_revisions` into a
fresh Alembic environment and runs ``upgrade``. The databases are compared by
reflection: tables, columns (name, type, nullable, default), primary keys,
foreign keys and indexes.

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

import json
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
from durable_core import ConfigurationError
from durable_core.sql import migrations, schema
from durable_core.sql.migrations import REVISION_SLUG, render_revision, write_revisions
from durable_core.sql.schema_history import LATEST, VERSIONS
from tests.conftest import empty_mysql_database, fresh_postgres_database

pytestmark = pytest.mark.anyio

DURABLE_TABLES = (
    "durable_schema_versions",
    "workflow_attempts",
    "workflow_attributes",
    "workflow_debounces",
    "workflow_events",
    "workflow_messages",
    "workflow_schedules",
    "workflow_step_tries",
    "workflow_steps",
    "workflow_streams",
    "workflow_updates",
    "workflow_workers",
    "workflows",
)
RELEASE_0_1 = Path(__file__).parent / "fixtures" / "schema_release_0_1.json"
"""The reflected schema release 0.1 created (before versions), on each database."""

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
    assert {"workflows", "workflow_steps"} <= set(a), f"durable tables missing from {url_a}: {a}"
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


async def apply_version(url: str | sa.URL, version: int) -> None:
    """Route (a), stopped at ``version``: :func:`durable_core.sql.migrations.upgrade`."""
    engine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(migrations.upgrade, version)
    finally:
        await engine.dispose()


def as_json(snapshot: dict[str, Any]) -> Any:
    """A reflected schema as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(snapshot))


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
        write_revisions(versions)
    config = Config()
    config.set_main_option("script_location", str(workdir))
    config.set_main_option("sqlalchemy.url", str(url).replace("%", "%%"))
    return config


def revision_of(workdir: Path, version: int) -> str:
    """The revision id ``durable alembic`` gave schema ``version`` in ``workdir``."""
    return migrations.written_revisions(workdir / "versions")[version][0]


async def alembic_upgrade(url: str, workdir: Path, version: int | None = None) -> Config:
    """Route (b): ``alembic upgrade`` to ``version`` (default: head) with the written revisions.

    Alembic's commands are synchronous (and an async ``env.py`` starts its own event
    loop), so they run in a worker thread.
    """
    config = alembic_config(url, workdir)
    target = "head" if version is None else revision_of(workdir, version)
    await anyio.to_thread.run_sync(command.upgrade, config, target)
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
    # What the reflection saw is what durable_core.sql.schema declares.
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


@pytest.mark.parametrize("version", [v.number for v in VERSIONS])
async def test_both_routes_agree_at_every_version(tmp_path: Path, version: int) -> None:
    programmatic = tmp_path / "programmatic.db"
    migrated = tmp_path / "migrated.db"
    await apply_version(f"sqlite:///{programmatic}", version)
    await alembic_upgrade(f"sqlite:///{migrated}", tmp_path / "alembic", version)
    await assert_same_schema(f"sqlite:///{programmatic}", f"sqlite:///{migrated}")
    assert sqlite_ddl(programmatic) == sqlite_ddl(migrated)
    for path in (programmatic, migrated):
        conn = sqlite3.connect(path)
        try:
            recorded = (
                conn.execute(
                    "SELECT version FROM durable_schema_versions ORDER BY version"
                ).fetchall()
                if version >= 2
                else []
            )
        finally:
            conn.close()
        assert [v for (v,) in recorded] == list(range(2, version + 1))


async def _first_table_only(url: str) -> None:
    """What a first install leaves when it stops after its first statement."""

    def first(conn: sa.Connection) -> None:
        from alembic.operations import Operations
        from alembic.runtime.migration import MigrationContext

        Operations(MigrationContext.configure(conn)).invoke(VERSIONS[0].operations()[0])

    engine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(first)
    finally:
        await engine.dispose()


async def assert_a_cut_short_install_is_finished(cut: str, whole: str) -> None:
    """On MySQL each DDL statement commits: a first install stopped after its first table
    leaves a database that reads as version 1 (as release 0.1's does); applying the schema
    again makes everything else, as a whole install does."""
    await _first_table_only(cut)
    await apply_programmatically(cut)
    await apply_programmatically(whole)
    assert sorted(await assert_same_schema(cut, whole)) == sorted(DURABLE_TABLES)


async def test_a_first_install_cut_short_is_finished_by_applying_the_schema_again(
    tmp_path: Path,
) -> None:
    await assert_a_cut_short_install_is_finished(
        f"sqlite:///{tmp_path / 'cut.db'}", f"sqlite:///{tmp_path / 'whole.db'}"
    )


async def test_a_first_install_cut_short_on_mariadb_is_finished_by_applying_it_again(
    mysql_url: str,
) -> None:
    await assert_a_cut_short_install_is_finished(
        await empty_mysql_database("durable_routes_cut"),
        await empty_mysql_database("durable_routes_whole"),
    )


async def test_version_1_is_what_release_0_1_created_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v1.db'}"
    await apply_version(url, 1)
    assert as_json(await schema_snapshot(url)) == json.loads(RELEASE_0_1.read_text())["sqlite"]


async def test_alembic_downgrade_base_removes_the_tables(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    config = await alembic_upgrade(f"sqlite:///{migrated}", tmp_path / "alembic")
    assert set(DURABLE_TABLES) <= set(sqlite_tables(migrated))
    await alembic_downgrade(config, revision_of(tmp_path / "alembic", 1))
    assert sqlite_tables(migrated) == ["alembic_version", "workflow_steps", "workflows"]
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
        await store.check_schema()
        assert await store.list_workflows() == []
        await store.apply_schema()  # idempotent over an Alembic-made schema
    finally:
        await store.close()


def test_write_revisions_chains_every_version_and_refuses_a_second_copy(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    paths = write_revisions(versions, down_revision="prev")
    assert [p.name.split("_", 1)[1] for p in paths] == [f"{v.slug}.py" for v in VERSIONS]
    assert paths[0].name.endswith(f"_{REVISION_SLUG}.py")
    written = migrations.written_revisions(versions)
    down: str | None = "prev"
    for version in VERSIONS:
        revision, path = written[version.number]
        text = path.read_text(encoding="utf-8")
        assert f"revision: str = {revision!r}" in text
        assert f"down_revision: str | None = {down!r}" in text
        assert "# ###" not in text
        compile(text, str(path), "exec")
        down = revision
    with pytest.raises(ConfigurationError, match="already exist"):
        write_revisions(versions)
    with pytest.raises(ConfigurationError, match="does not exist"):
        write_revisions(tmp_path / "nowhere")
    rendered = render_revision(VERSIONS[0], "r1", None)
    for table in ("workflow_steps", "workflows"):
        assert f"op.create_table('{table}'" in rendered and f"op.drop_table('{table}')" in rendered


def test_write_revisions_adds_the_new_versions_on_top_of_release_0_1s(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    first = versions / f"abc123_{REVISION_SLUG}.py"
    first.write_text(render_revision(VERSIONS[0], "abc123", None), encoding="utf-8")
    paths = write_revisions(versions)
    assert len(paths) == LATEST - 1
    assert "down_revision: str | None = 'abc123'" in paths[0].read_text(encoding="utf-8")


# -- the same comparison on the server databases -----------------------------------------


def _async(url: str) -> str:
    return async_url(url).render_as_string(hide_password=False)


async def test_both_routes_give_identical_schema_on_postgresql(
    postgres_url: str, tmp_path: Path
) -> None:
    url_a = await fresh_postgres_database(postgres_url, "durable_routes_a")
    url_b = await fresh_postgres_database(postgres_url, "durable_routes_b")
    await apply_programmatically(url_a)
    await alembic_upgrade(_async(url_b), tmp_path / "alembic")
    snapshot = await assert_same_schema(url_a, url_b)
    assert {"ix_workflows_status_run_at", "ix_workflows_status_locked_until"} <= {
        name for name, _columns, _unique in snapshot["workflows"]["indexes"]
    }


async def test_both_routes_give_identical_schema_on_mariadb(mysql_url: str, tmp_path: Path) -> None:
    url_a = await empty_mysql_database("durable_routes_a")
    url_b = await empty_mysql_database("durable_routes_b")
    engine = create_async_engine(async_url(url_b))
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
    finally:
        await engine.dispose()
    await apply_programmatically(url_a)
    await alembic_upgrade(_async(url_b), tmp_path / "alembic")
    await assert_same_schema(url_a, url_b)


async def test_version_1_is_what_release_0_1_created_on_postgresql(postgres_url: str) -> None:
    url = await fresh_postgres_database(postgres_url, "durable_routes_v1")
    await apply_version(url, 1)
    expected = json.loads(RELEASE_0_1.read_text())["postgresql"]
    assert as_json(await schema_snapshot(url)) == expected


async def test_version_1_is_what_release_0_1_created_on_mariadb(mysql_url: str) -> None:
    url = await empty_mysql_database("durable_routes_v1")
    await apply_version(url, 1)
    assert as_json(await schema_snapshot(url)) == json.loads(RELEASE_0_1.read_text())["mysql"]
