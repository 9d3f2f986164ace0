"""`DurableClient`'s admin API: list, get, retry, cancel and fork, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    InvalidStateError,
    WorkflowNotFoundError,
    WorkflowStatus,
    recv,
    workflow,
    workflow_step,
)
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

CALLS: list[str] = []
BROKEN: set[str] = set()


@workflow_step
async def reserve(order: str) -> str:
    CALLS.append(f"reserve {order}")
    return f"reserved {order}"


@workflow_step
async def charge(order: str) -> str:
    CALLS.append(f"charge {order}")
    if "charge" in BROKEN:
        raise ConnectionError("card API down")
    return f"charged {order}"


@workflow(max_attempts=2, timeout=timedelta(hours=1))
async def checkout(order: str) -> list[str]:
    return [await reserve(order), await charge(order)]


@workflow
async def inbox() -> str:
    return str(await recv("go"))


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    CALLS.clear()
    BROKEN.clear()
    return sqlite_or_postgres


async def test_list_get_retry_and_cancel(store: Store) -> None:
    client, runner = DurableClient(store), WorkflowRunner(store)
    BROKEN.add("charge")
    failed = await client.start_workflow(checkout, "A1")
    assert await runner.run_until_complete(failed) is WorkflowStatus.FAILED
    waiting = await client.start_workflow(inbox)
    await runner.run_once(waiting)
    pending = await client.start_workflow(checkout, "A2")

    newest_first = [pending.id, waiting.id, failed.id]
    assert [r.id for r in await client.list_workflows()] == newest_first
    assert [r.id for r in await client.list_workflows(limit=2)] == newest_first[:2]
    assert [r.id for r in await client.list_workflows(status="failed")] == [failed.id]
    assert [r.id for r in await client.list_workflows(status=WorkflowStatus.WAITING)] == [
        waiting.id
    ]
    assert [r.id for r in await client.list_workflows(name=checkout.name)] == [
        pending.id,
        failed.id,
    ]
    with pytest.raises(ConfigurationError, match="unknown status 'done'; one of pending"):
        await client.list_workflows(status="done")
    with pytest.raises(ConfigurationError, match="limit"):
        await client.list_workflows(limit=0)

    record = await client.get(failed.id)
    assert (record.id, record.name, record.status) == (failed.id, checkout.name, "failed")
    with pytest.raises(WorkflowNotFoundError):
        await client.get("no-such-workflow")

    BROKEN.clear()
    await client.retry(failed.id)
    assert (await client.get(failed.id)).status is WorkflowStatus.PENDING
    assert await runner.run_until_complete(failed) is WorkflowStatus.SUCCEEDED
    assert CALLS.count("reserve A1") == 1, "the retry resumed from the cache"
    with pytest.raises(InvalidStateError, match="only failed or cancelled"):
        await client.retry(failed.id)

    await client.cancel(waiting.id)
    assert (await client.get(waiting.id)).status is WorkflowStatus.CANCELLED


async def test_fork_reruns_from_the_step_given(store: Store) -> None:
    client, runner = DurableClient(store), WorkflowRunner(store)
    original = await client.start_workflow(checkout, "B1")
    assert await runner.run_until_complete(original) is WorkflowStatus.SUCCEEDED
    before = await client.get(original.id)

    fork = await client.fork(original.id, from_step=1)
    record = await client.get(fork.id)
    assert fork.id != original.id
    assert (record.name, record.input, record.status) == (before.name, before.input, "pending")
    assert (record.max_attempts, record.attempts, record.parent_id) == (2, 0, None)
    assert record.deadline is not None
    assert record.deadline - record.created_at == timedelta(hours=1), "the same timeout"
    assert [(s.step_index, s.status) for s in await fork.steps()] == [(0, "succeeded")]

    assert await runner.run_until_complete(fork) is WorkflowStatus.SUCCEEDED
    assert await fork.output() == ["reserved B1", "charged B1"]
    assert CALLS == ["reserve B1", "charge B1", "charge B1"], "step 0 came from the cache"
    assert await client.get(original.id) == before, "the original is untouched"

    from_start = await client.fork(original.id, from_step=0)
    assert await from_start.steps() == []
    assert await runner.run_until_complete(from_start) is WorkflowStatus.SUCCEEDED
    assert CALLS[3:] == ["reserve B1", "charge B1"]


async def test_fork_refuses_a_bad_step_or_an_unknown_workflow(store: Store) -> None:
    client = DurableClient(store)
    handle = await client.start_workflow(checkout, "C1")
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ConfigurationError, match="from_step is a step index"):
            await client.fork(handle.id, from_step=bad)  # type: ignore[arg-type]
    with pytest.raises(WorkflowNotFoundError):
        await client.fork("no-such-workflow", from_step=1)
    assert [r.id for r in await client.list_workflows()] == [handle.id], "nothing was written"
