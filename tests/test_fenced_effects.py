"""A body's late writes once its worker lost the lease (issue 34, defect 5): a send and a
child start on its own store, refused in the transaction that would write them; a send or
a start on another store, and the writes of roles that take no lease (a debounced start,
a cancel), which its store cannot fence in that transaction, refused once the lease fails
to renew just before (the one exception). The crash tests with real worker processes are
tests/worker/test_fenced_effects_processes.py.

In-process on SQLite files: the body has another worker take its workflow over (the
lease's end moved to the past, then a real acquire) just before the write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from durable_core import (
    DebounceKey,
    DurableClient,
    WorkflowContext,
    WorkflowStatus,
    workflow,
)
from durable_core.sql.schema import workflow_messages, workflows
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore
from tests.conftest import migrated_sqlite_url

pytestmark = pytest.mark.anyio

ELSEWHERE: dict[str, SQLiteStore] = {}
"""The other store of the running test."""


@workflow(name="fenced_effects.target")
async def target() -> None:
    """What the writes aim at (started an hour ahead: it never runs here)."""


async def lose_the_lease() -> None:
    """Another worker takes the running workflow over, as it may once its lease ran out."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    store = ctx.store
    assert isinstance(store, SQLiteStore)
    async with store.connector.engine.begin() as conn:
        await conn.execute(
            workflows.update()
            .where(workflows.c.id == ctx.workflow_id)
            .values(locked_until=sa.func.datetime("now", "-1 minute"))
        )
    taken = await store.acquire(ctx.workflow_id, worker_id="owner", lease_seconds=60)
    assert taken is not None, "the other worker took the workflow over"


@workflow(name="fenced_effects.late")
async def late(kind: str, to: str) -> None:
    ctx = WorkflowContext.current()
    assert ctx is not None
    here, there = DurableClient(ctx.store), DurableClient(ELSEWHERE["store"])
    await lose_the_lease()
    if kind == "send":
        await here.send(to, "late", topic="t", idempotency_key="late")
    elif kind == "child_start":
        await here.start_workflow_with_id("late-child", target)
    elif kind == "send_elsewhere":
        await there.send(to, "late", topic="t", idempotency_key="late")
    elif kind == "start_elsewhere":
        await there.start_workflow_with_id("late-start", target)
    elif kind == "cancel":
        await here.cancel(to)
    elif kind == "debounce":
        await here.start_workflow_debounced(DebounceKey("late", 60), target)
    else:
        raise AssertionError(kind)


@pytest.fixture
async def elsewhere(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(await migrated_sqlite_url(tmp_path / "elsewhere.db", tmp_path_factory))
    await store.open()
    ELSEWHERE["store"] = store
    try:
        yield store
    finally:
        del ELSEWHERE["store"]
        await store.close()


@pytest.mark.parametrize(
    "kind", ["send", "child_start", "send_elsewhere", "start_elsewhere", "cancel", "debounce"]
)
async def test_a_late_write_is_refused_once_the_lease_is_lost(
    kind: str, sqlite_store: SQLiteStore, elsewhere: SQLiteStore
) -> None:
    here = DurableClient(sqlite_store)
    aimed_here = await here.start_workflow_later(3600, target)
    aimed_there = await DurableClient(elsewhere).start_workflow_later(3600, target)
    to = aimed_there.id if kind == "send_elsewhere" else aimed_here.id
    handle = await here.start_workflow(late, kind, to)
    await WorkflowRunner(sqlite_store, worker_id="zombie").run_once(handle)

    info = await handle.info()
    assert (info.status, info.locked_by) == (WorkflowStatus.RUNNING, "owner"), "taken over"
    assert await handle.steps() == [], "the write's call is not recorded"
    for store in (sqlite_store, elsewhere):
        async with store.connector.engine.begin() as conn:
            count = sa.select(sa.func.count()).select_from(workflow_messages)
            assert (await conn.execute(count)).scalar() == 0, "no message sent"
    assert await elsewhere.get_workflow("late-start") is None, "no workflow started there"
    assert await sqlite_store.get_workflow("late-child") is None, "no child started"
    assert await aimed_here.status() is WorkflowStatus.PENDING, "nothing cancelled"
    started = await sqlite_store.list_workflows(name=target.name)
    assert [row.id for row in started] == [aimed_here.id], "no debounced start"
