"""A database as release 0.1 left it: its tables (schema version 1) and rows in every state.

``tests/fixtures/schema_release_0_1.json`` holds the schema release 0.1 itself
created, reflected on each database; ``test_schema_routes`` proves version 1 of
the history builds exactly that. The rows are what its store wrote: workflows
succeeded, failed, cancelled, waiting out a retry with a cached step, and fresh.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from durable_core.codec import encode, encode_arguments
from durable_core.sql import migrations
from durable_core.sql.schema import build_metadata

V1 = build_metadata(1)
WORKFLOWS = V1.tables["workflows"]
STEPS = V1.tables["workflow_steps"]


def _args(*args: Any) -> str:
    return encode_arguments(args, {}, what="test input")


def rows(name: str, step_names: tuple[str, str, str]) -> dict[str, list[dict[str, Any]]]:
    """Release-0.1 rows of workflow ``name`` (``n -> (n + 1) * 2 - 3`` over three steps)."""
    now = datetime.now(UTC).replace(microsecond=123456)
    earlier = now - timedelta(hours=1)
    first, second, third = step_names
    error = json.dumps(
        {
            "type": "builtins.RuntimeError",
            "message": "boom",
            "traceback": "Traceback ...\nRuntimeError: boom\n",
            "step_index": 1,
            "step_name": second,
        }
    )

    def workflow(id: str, status: str, n: int, attempts: int, **extra: Any) -> dict[str, Any]:
        return {
            "id": id,
            "name": name,
            "status": status,
            "input": _args(n),
            "output": None,
            "error": None,
            "attempts": attempts,
            "max_attempts": 3,
            "run_at": earlier,
            "locked_by": None,
            "lock_token": None,
            "locked_until": None,
            "created_at": earlier,
            "updated_at": earlier,
            "completed_at": None,
            **extra,
        }

    def step(workflow_id: str, index: int, step_name: str, n: int, **extra: Any) -> dict[str, Any]:
        return {
            "workflow_id": workflow_id,
            "step_index": index,
            "step_name": step_name,
            "status": "succeeded",
            "input": _args(n),
            "output": encode([n + 1, n * 2, n - 3][index]),
            "error": None,
            "attempts": 1,
            "started_at": earlier,
            "completed_at": earlier,
            **extra,
        }

    return {
        "workflows": [
            workflow("v1-succeeded", "succeeded", 1, 1, output="1", completed_at=now),
            workflow("v1-failed", "failed", 2, 3, error=error, completed_at=now),
            workflow("v1-cancelled", "cancelled", 3, 1, completed_at=now),
            # Attempt 1 failed in its second step; the first step's output is cached.
            workflow("v1-retrying", "pending", 4, 1, error=error),
            workflow("v1-fresh", "pending", 5, 0),
        ],
        "workflow_steps": [
            step("v1-succeeded", 0, first, 1),
            step("v1-succeeded", 1, second, 2),
            step("v1-succeeded", 2, third, 4),
            step("v1-failed", 0, first, 2),
            step("v1-failed", 1, second, 3, status="failed", output=None, error=error, attempts=3),
            step("v1-retrying", 0, first, 4),
            step("v1-retrying", 1, second, 5, status="failed", output=None, error=error),
        ],
    }


async def create(
    url: str | sa.URL, data: dict[str, list[dict[str, Any]]], version: int = 1
) -> None:
    """Make the release-0.1 tables at ``url`` (which must have none) and insert ``data``;
    then, with ``version`` above 1, upgrade them as that later release did."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(migrations.upgrade, 1)
            await conn.execute(WORKFLOWS.insert(), data["workflows"])
            await conn.execute(STEPS.insert(), data["workflow_steps"])
        if version > 1:
            async with engine.begin() as conn:
                await conn.run_sync(migrations.upgrade, version)
    finally:
        await engine.dispose()


async def read(url: str | sa.URL) -> dict[str, list[dict[str, Any]]]:
    """Every row of the release-0.1 tables (their version-1 columns), in key order."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            workflows = await conn.execute(sa.select(WORKFLOWS).order_by(WORKFLOWS.c.id))
            steps = await conn.execute(
                sa.select(STEPS).order_by(STEPS.c.workflow_id, STEPS.c.step_index)
            )
            return {
                "workflows": [dict(row._mapping) for row in workflows],
                "workflow_steps": [dict(row._mapping) for row in steps],
            }
    finally:
        await engine.dispose()


def sort(data: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """``data`` in the order :func:`read` returns it."""
    return {
        "workflows": sorted(data["workflows"], key=lambda r: r["id"]),
        "workflow_steps": sorted(
            data["workflow_steps"], key=lambda r: (r["workflow_id"], r["step_index"])
        ),
    }
