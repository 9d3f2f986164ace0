"""Helpers shared by the contract classes: building rows, odd payloads, raw tampering."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from ..caller.client import new_workflow_id
from ..seams.records import NewWorkflow, StepRecord, StepTryRecord, WorkflowRecord
from ..seams.store import Store
from ..sql.schema import workflow_steps, workflows

EMPTY_INPUT = '{"args":[],"kwargs":{}}'
SAFETY_SECONDS = 120.0
"""How long a contract test may wait before it is called hung: never a measure of speed,
so a slow or loaded machine does not fail the suite."""


def unique_name(prefix: str = "contract") -> str:
    """A workflow name no other test uses."""
    return f"durable_contract.{prefix}.{uuid.uuid4().hex[:12]}"


def new_workflow(
    name: str | None = None,
    *,
    input: str = EMPTY_INPUT,
    max_attempts: int = 3,
    delay_seconds: float = 0.0,
    id: str | None = None,
) -> NewWorkflow:
    """A row to enqueue, with a fresh time-ordered id unless ``id`` is given."""
    return NewWorkflow(
        id=id or new_workflow_id(),
        name=name or unique_name(),
        input=input,
        max_attempts=max_attempts,
        delay_seconds=delay_seconds,
    )


@dataclass(frozen=True)
class Snapshot:
    """Everything a store holds about one workflow, for before/after comparisons."""

    workflow: WorkflowRecord | None
    steps: tuple[StepRecord, ...]
    tries: tuple[StepTryRecord, ...] = ()


async def snapshot(store: Store, workflow_id: str) -> Snapshot:
    """Read the workflow row, its steps and its steps' failed tries."""
    return Snapshot(
        await store.get_workflow(workflow_id),
        tuple(await store.load_steps(workflow_id)),
        tuple(await store.load_step_tries(workflow_id)),
    )


def _nested(depth: int) -> Any:
    value: Any = "bottom ☃"
    for level in range(depth):
        value = {"level": level, "items": [value, None, True, -1.5e-300]}
    return value


ODD_TEXTS: dict[str, str] = {
    "unicode": json.dumps(
        {
            "latin": "héllo wörld ñ ß ø å",
            "cjk": "漢字かなカナ한국어",
            "rtl": "مرحبا بالعالم שלום",
            "combining": "e\u0301 a\u0308 Z\u0335\u0321",
            "astral": "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 𝄞 🀄",
            "separators": "\u2028\u2029\u00a0\ufeff\u200b",
        },
        ensure_ascii=False,
    ),
    "emoji": json.dumps(
        ["😀", "🎉", "👩\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "👍🏽", "🇯🇵"], ensure_ascii=False
    ),
    "control": "".join(chr(c) for c in range(1, 32)) + "\x7f\x80\x9f",
    "whitespace": "  leading and trailing spaces  \r\n\ttabs\t\r\rcr\n\n",
    "escapes": (
        r'{"quote": "\"", "backslash": "\\", '
        r'"unicode": "\u00e9\ud83d\ude00", "path": "C:\\x"}'
    ),
    "sql": "'; DROP TABLE workflows; -- \" ` $1 %s ? :name",
    "nested": json.dumps(_nested(200), ensure_ascii=False),
}
"""Texts a store must keep exactly: no re-encoding, trimming or newline changes."""


def big_text(megabytes: int) -> str:
    """A JSON string value of about ``megabytes`` MB with multi-byte characters throughout."""
    unit = '{"k":"value-é-😀-漢"},'
    count = megabytes * 1_000_000 // len(unit.encode())
    return "[" + unit * count + '{"end":true}]'


class Tamper(Protocol):
    """Writes a raw value into a stored row behind the store's back (to simulate corruption)."""

    async def __call__(
        self,
        table: str,
        column: str,
        value: str | None,
        *,
        workflow_id: str,
        step_index: int | None = None,
    ) -> None: ...


def engine_tamper(engine: AsyncEngine) -> Tamper:
    """A :class:`Tamper` that updates the durable tables through ``engine``."""

    async def tamper(
        table: str,
        column: str,
        value: str | None,
        *,
        workflow_id: str,
        step_index: int | None = None,
    ) -> None:
        if table == "workflows":
            stmt = workflows.update().where(workflows.c.id == workflow_id)
        elif table == "workflow_steps":
            if step_index is None:
                raise ValueError("tampering with a step needs its step_index")
            stmt = workflow_steps.update().where(
                workflow_steps.c.workflow_id == workflow_id,
                workflow_steps.c.step_index == step_index,
            )
        else:
            raise ValueError(f"unknown table {table!r}")
        async with engine.begin() as conn:
            result = await conn.execute(stmt.values({column: value}))
        if result.rowcount != 1:
            raise AssertionError(f"tampering matched {result.rowcount} rows of {table}, not 1")

    return tamper


def default_tamper(store: Store) -> Tamper:
    """The tamper for stores with a SQLAlchemy ``engine`` (as the SQLite and MySQL stores have).

    Other stores get a tamper that fails, naming the fixture to override.
    """
    engine = getattr(store, "engine", None)
    if isinstance(engine, AsyncEngine):
        return engine_tamper(engine)

    async def cannot_tamper(
        table: str,
        column: str,
        value: str | None,
        *,
        workflow_id: str,
        step_index: int | None = None,
    ) -> None:
        raise NotImplementedError(
            f"{store.description} exposes no SQLAlchemy `engine`, so the contract suite cannot "
            "corrupt a row on its own: override the `durable_tamper` fixture to return an async "
            "callable (table, column, value, *, workflow_id, step_index=None) that writes the "
            "raw value into that row"
        )

    return cannot_tamper


__all__ = [
    "EMPTY_INPUT",
    "ODD_TEXTS",
    "Snapshot",
    "Tamper",
    "big_text",
    "default_tamper",
    "engine_tamper",
    "new_workflow",
    "snapshot",
    "unique_name",
]
