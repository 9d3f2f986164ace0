"""Bringing a database to the current schema: in place from code, or as Alembic revisions.

Both routes run the same operations, those of
:data:`durable_core.sql.schema_history.VERSIONS`:

- :func:`upgrade` applies the versions a database lacks, on a synchronous
  SQLAlchemy connection (``apply_schema()`` and ``durable migrate`` call it);
- :func:`write_revisions` renders each version a user's Alembic project lacks
  as a revision file, chained on top of the last one.

A database made before versions were recorded (release 0.1: the two tables,
no ``durable_schema_versions``) counts as version 1.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import textwrap
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.operations import ops

from ..durations import utcnow
from ..errors import ConfigurationError
from .schema import SCHEMA_VERSION, metadata, schema_versions
from .schema_history import NOT_ON_SQLITE, VERSIONS, VERSIONS_TABLE, SchemaVersion
from .schema_ops import NOT_ADDITIVE

REVISION_SLUG = VERSIONS[0].slug
"""The slug of the first revision (``<revision>_create_durable_workflow_tables.py``)."""


# -- in place ----------------------------------------------------------------------------------


def current_version(conn: sa.Connection) -> int:
    """The schema version of the database: 0 when it has no durable tables."""
    inspector = sa.inspect(conn)
    if inspector.has_table(VERSIONS_TABLE):
        found = conn.execute(sa.select(sa.func.max(schema_versions.c.version))).scalar()
        return int(found) if found is not None else 1
    return 1 if inspector.has_table("workflows") else 0


def version_row(number: int) -> dict[str, Any]:
    """The ``durable_schema_versions`` row recording that version ``number`` is applied."""
    version = VERSIONS[number - 1]
    return {
        "version": number,
        "description": version.message if version.additive else NOT_ADDITIVE + version.message,
        "applied_at": utcnow(),
    }


def newer_versions(conn: sa.Connection) -> list[tuple[int, str]]:
    """The versions a database records past this release's (``(number, description)``, in
    order): applied by a newer release."""
    if not sa.inspect(conn).has_table(VERSIONS_TABLE):
        return []
    rows = conn.execute(
        sa.select(schema_versions.c.version, schema_versions.c.description)
        .where(schema_versions.c.version > SCHEMA_VERSION)
        .order_by(schema_versions.c.version)
    )
    return [(int(number), str(description)) for number, description in rows]


def pending(found: int) -> list[SchemaVersion]:
    """The versions a database at version ``found`` lacks."""
    return list(VERSIONS[found:SCHEMA_VERSION])


def _has_table(inspector: sa.Inspector, op: ops.MigrateOperation) -> bool:
    assert isinstance(op, ops.CreateTableOp)
    return inspector.has_table(op.table_name)


def _has_index(inspector: sa.Inspector, op: ops.MigrateOperation) -> bool:
    assert isinstance(op, ops.CreateIndexOp)
    return op.index_name in {ix["name"] for ix in inspector.get_indexes(op.table_name)}


def _has_column(inspector: sa.Inspector, op: ops.MigrateOperation) -> bool:
    assert isinstance(op, ops.AddColumnOp)
    return op.column.name in {c["name"] for c in inspector.get_columns(op.table_name)}


def _index_gone(inspector: sa.Inspector, op: ops.MigrateOperation) -> bool:
    assert isinstance(op, ops.DropIndexOp)
    return op.index_name not in {ix["name"] for ix in inspector.get_indexes(str(op.table_name))}


def _foreign_keys(inspector: sa.Inspector, table: str) -> set[str | None]:
    return {key["name"] for key in inspector.get_foreign_keys(table)}


def _key_gone(inspector: sa.Inspector, op: ops.MigrateOperation) -> bool:
    assert isinstance(op, ops.DropConstraintOp)
    return op.constraint_name not in _foreign_keys(inspector, op.table_name)


def _has_key(inspector: sa.Inspector, op: ops.MigrateOperation) -> bool:
    assert isinstance(op, ops.CreateForeignKeyOp)
    return op.constraint_name in _foreign_keys(inspector, op.source_table)


def _altered(inspector: sa.Inspector, op: ops.MigrateOperation) -> bool:
    assert isinstance(op, ops.AlterColumnOp) and op.modify_type is not None
    [column] = [c for c in inspector.get_columns(op.table_name) if c["name"] == op.column_name]
    return getattr(column["type"], "length", None) == getattr(op.modify_type, "length", None)


# An operation whose result is already there is skipped, so an upgrade interrupted
# half-way (MySQL commits each DDL statement on its own) can simply be run again.
_PRESENT: dict[type[ops.MigrateOperation], Callable[[sa.Inspector, ops.MigrateOperation], bool]] = {
    ops.CreateTableOp: _has_table,
    ops.CreateIndexOp: _has_index,
    ops.AddColumnOp: _has_column,
    ops.DropIndexOp: _index_gone,
    ops.DropConstraintOp: _key_gone,
    ops.CreateForeignKeyOp: _has_key,
    ops.AlterColumnOp: _altered,
}


_ALEMBIC_NOTES = logging.getLogger("alembic.runtime.migration")


@contextlib.contextmanager
def _quiet_alembic() -> Iterator[None]:
    """Alembic's INFO notes on the context it makes (``Context impl SQLiteImpl.``, ``Will
    assume non-transactional DDL.``) say nothing to whoever migrates through us: keep its
    warnings only while we run it, so ``durable migrate``'s output stays the user's."""
    level = _ALEMBIC_NOTES.level
    _ALEMBIC_NOTES.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        _ALEMBIC_NOTES.setLevel(level)


def upgrade(conn: sa.Connection, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Apply every version after the database's own up to ``target``; return ``(before, after)``.

    Idempotent: a database already at ``target`` is left as it is.
    """
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    before = current_version(conn)
    # A database with none of the durable tables has none of their parts either: every
    # operation runs without first reflecting whether its result is there (the reflection
    # was three quarters of a new PostgreSQL database's schema time, half of SQLite's).
    empty = before == 0 and not set(sa.inspect(conn).get_table_names()) & set(metadata.tables)
    sqlite = conn.dialect.name == "sqlite"
    with _quiet_alembic():
        context = MigrationContext.configure(conn)
    operations = Operations(context)
    # Version 1 is recorded nowhere: release 0.1's tables and a first install that stopped
    # after its first table (MySQL commits each DDL statement) both read as version 1, so
    # its operations are checked again and what the latter lacks is made.
    for version in VERSIONS[0 if before == 1 else before : target]:
        for op in version.operations():
            if sqlite and isinstance(op, NOT_ON_SQLITE):
                continue
            if empty or not _PRESENT[type(op)](sa.inspect(conn), op):
                operations.invoke(op)
        if version.number >= 2:
            conn.execute(schema_versions.insert(), [version_row(version.number)])
    return before, max(before, target)


# -- as Alembic revisions ---------------------------------------------------------------------

_TEMPLATE = '''"""{message}

Written by `durable alembic` from durable-core's schema (version {number}).

Revision ID: {revision}
Revises: {down_revision}
Create Date: {created}
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

import durable_core.sql.migrations
import durable_core.sql.schema

revision: str = {revision!r}
down_revision: str | None = {down_revision!r}
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
{upgrade}


def downgrade() -> None:
{downgrade}
'''

_RECORD = (
    "    op.bulk_insert(durable_core.sql.schema.schema_versions, "
    "[durable_core.sql.migrations.version_row({number})])"
)
_FORGET = (
    "    op.execute(durable_core.sql.schema.schema_versions.delete()"
    ".where(durable_core.sql.schema.schema_versions.c.version == {number}))"
)


def _render(operations: list[ops.MigrateOperation]) -> str:
    from alembic.autogenerate import render_python_code

    code = render_python_code(
        ops.UpgradeOps(ops=operations), user_module_prefix="durable_core.sql.schema."
    )
    code = re.sub(r"^[ \t]*# ###.*\n?", "", code, flags=re.MULTILINE)
    return "\n".join(line for line in code.splitlines() if line.strip())


_SQLITE_GUARD = (
    '    if op.get_bind().dialect.name != "sqlite":'
    "  # SQLite alters no column or constraint, nor checks a VARCHAR's length"
)


def _render_guarded(operations: list[ops.MigrateOperation]) -> str:
    """``operations`` rendered in order, those SQLite skips under a dialect test."""
    parts = []
    for skipped, group in itertools.groupby(operations, lambda op: isinstance(op, NOT_ON_SQLITE)):
        code = _render(list(group))
        parts.append(f"{_SQLITE_GUARD}\n{textwrap.indent(code, '    ')}" if skipped else code)
    return "\n".join(parts)


def render_revision(version: SchemaVersion, revision: str, down_revision: str | None) -> str:
    """The text of the revision file for one schema version."""
    forward = version.operations()
    created = {op.table_name for op in forward if isinstance(op, ops.CreateTableOp)}
    # Dropping a table drops its indexes and columns: reverse only the table itself.
    backward = [
        op.reverse()
        for op in reversed(forward)
        if isinstance(op, ops.CreateTableOp) or getattr(op, "table_name", None) not in created
    ]
    upgrade_lines = [_render_guarded(forward)]
    downgrade_lines = [_render_guarded(backward)]
    if version.number >= 2:
        upgrade_lines.append(_RECORD.format(number=version.number))
        downgrade_lines.insert(0, _FORGET.format(number=version.number))
    return _TEMPLATE.format(
        message=version.message,
        number=version.number,
        revision=revision,
        down_revision=down_revision,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        upgrade="\n".join(upgrade_lines),
        downgrade="\n".join(downgrade_lines),
    )


_REVISION_ID = re.compile(r"^revision: str = '([^']+)'", re.MULTILINE)


def written_revisions(versions_dir: Path) -> dict[int, tuple[str, Path]]:
    """The durable schema revisions already in ``versions_dir``: version -> (revision, file)."""
    found: dict[int, tuple[str, Path]] = {}
    for version in VERSIONS:
        for path in sorted(versions_dir.glob(f"*_{version.slug}.py")):
            match = _REVISION_ID.search(path.read_text(encoding="utf-8"))
            if match:
                found[version.number] = (match.group(1), path)
    return found


def write_revisions(versions_dir: str | Path, *, down_revision: str | None = None) -> list[Path]:
    """Write a revision for every schema version ``versions_dir`` lacks; return their paths.

    The first new revision goes on top of ``down_revision`` (default: the last
    durable revision already there), each next one on top of the one before.
    Raises :class:`ConfigurationError` when every version is already written.
    """
    directory = Path(versions_dir)
    if not directory.is_dir():
        raise ConfigurationError(f"Alembic versions directory {directory} does not exist")
    written = written_revisions(directory)
    missing = [version for version in VERSIONS if version.number not in written]
    if not missing:
        path = written[SCHEMA_VERSION][1]
        raise ConfigurationError(
            f"the durable schema revisions already exist up to version {SCHEMA_VERSION}: {path}"
        )
    if missing[0].number > 1 and missing[0].number - 1 in written and down_revision is None:
        down_revision = written[missing[0].number - 1][0]
    paths = []
    for version in missing:
        revision = uuid.uuid4().hex[:12]
        path = directory / f"{revision}_{version.slug}.py"
        path.write_text(render_revision(version, revision, down_revision), encoding="utf-8")
        paths.append(path)
        down_revision = revision
    return paths


def versions_dir_from_ini(ini_path: str | Path) -> tuple[Path, str | None]:
    """The versions directory and current head of the Alembic project at ``ini_path``."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    path = Path(ini_path)
    if not path.is_file():
        raise ConfigurationError(f"no Alembic config at {path}")
    script = ScriptDirectory.from_config(Config(str(path)))
    return Path(script.versions), script.get_current_head()
