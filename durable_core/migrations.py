"""Alembic revision files for the durable tables, written into the user's project.

The revision is rendered from :data:`durable_core.schema.metadata` by Alembic's
own code renderer, so it creates exactly what :func:`~durable_core.schema.apply_schema`
creates, frozen at the time it was written (later releases add new revisions
rather than changing this one).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

from . import schema
from .errors import ConfigurationError

REVISION_SLUG = "create_durable_workflow_tables"

_TEMPLATE = '''"""{message}

Written by `durable alembic` from durable-core's schema.

Revision ID: {revision}
Revises: {down_revision}
Create Date: {created}
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

import durable_core.schema

revision: str = {revision!r}
down_revision: str | None = {down_revision!r}
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
{upgrade}


def downgrade() -> None:
{downgrade}
'''


def render_revision(revision: str, down_revision: str | None) -> str:
    """The text of the revision file."""
    try:
        from alembic.autogenerate import render_python_code
        from alembic.operations import ops
    except ImportError as exc:
        raise ConfigurationError(
            "writing Alembic revisions needs alembic: pip install 'durable-core[alembic]'"
        ) from exc

    upgrade_ops: list[ops.MigrateOperation] = []
    downgrade_ops: list[ops.MigrateOperation] = []
    for table in schema.metadata.sorted_tables:
        upgrade_ops.append(ops.CreateTableOp.from_table(table))
        for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
            upgrade_ops.append(ops.CreateIndexOp.from_index(index))
    for table in reversed(schema.metadata.sorted_tables):
        downgrade_ops.append(ops.DropTableOp.from_table(table))

    def render(operations: list[ops.MigrateOperation]) -> str:
        code = render_python_code(
            ops.UpgradeOps(ops=operations),
            user_module_prefix="durable_core.schema.",
        )
        code = re.sub(r"^[ \t]*# ###.*\n?", "", code, flags=re.MULTILINE)
        return "\n".join(line for line in code.splitlines() if line.strip()) or "    pass"

    return _TEMPLATE.format(
        message="create the durable workflow tables",
        revision=revision,
        down_revision=down_revision,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        upgrade=render(upgrade_ops),
        downgrade=render(downgrade_ops),
    )


def write_revision(
    versions_dir: str | Path, *, down_revision: str | None = None, revision: str | None = None
) -> Path:
    """Write the revision into ``versions_dir`` and return its path.

    Refuses to write a second copy when one is already there.
    """
    directory = Path(versions_dir)
    if not directory.is_dir():
        raise ConfigurationError(f"Alembic versions directory {directory} does not exist")
    existing = sorted(directory.glob(f"*_{REVISION_SLUG}.py"))
    if existing:
        raise ConfigurationError(f"the durable tables revision already exists: {existing[0]}")
    revision = revision or uuid.uuid4().hex[:12]
    path = directory / f"{revision}_{REVISION_SLUG}.py"
    path.write_text(render_revision(revision, down_revision), encoding="utf-8")
    return path


def versions_dir_from_ini(ini_path: str | Path) -> tuple[Path, str | None]:
    """The versions directory and current head of the Alembic project at ``ini_path``."""
    try:
        from alembic.config import Config
        from alembic.script import ScriptDirectory
    except ImportError as exc:
        raise ConfigurationError(
            "reading alembic.ini needs alembic: pip install 'durable-core[alembic]'"
        ) from exc
    path = Path(ini_path)
    if not path.is_file():
        raise ConfigurationError(f"no Alembic config at {path}")
    script = ScriptDirectory.from_config(Config(str(path)))
    return Path(script.versions), script.get_current_head()
