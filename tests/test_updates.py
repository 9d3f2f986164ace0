"""Updates end to end on every backend: a caller's request and the body's reply, a
retried caller getting the same reply, a validator's rejection left out of the history,
and bad input."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    FrameworkError,
    UpdateConflictError,
    UpdateNotHandledError,
    UpdateRejectedError,
    UpdateRequest,
    UpdateTimeoutError,
    WorkflowHandle,
    WorkflowNotFoundError,
    WorkflowStatus,
    recv_update,
    workflow,
)
from durable_core.caller.sync import SyncClient
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from tests.talk_support import talk_store
from tests.test_streams import counts_to

__all__ = ["talk_store"]

pytestmark = pytest.mark.anyio


def positive(payload: Any) -> None:
    if payload["amount"] <= 0:
        raise ValueError(f"amount must be positive, got {payload['amount']}")


@workflow
async def approvals(n: int) -> list[int]:
    """Takes ``n`` approvals, replying to each with the running total."""
    total, seen = 0, []
    for _ in range(n):
        req = await recv_update("approve", validate=positive)
        assert req is not None
        total += req.payload["amount"]
        seen.append(req.payload["amount"])
        await req.reply({"total": total})
    return seen


@workflow
async def waits_briefly() -> bool:
    return await recv_update("approve", timeout=5) is None


async def drive(runner: WorkflowRunner, handle: WorkflowHandle[Any]) -> WorkflowStatus:
    """Run the workflow whenever something woke it, until it ends."""
    status = await handle.status()
    while not status.is_terminal:
        if status is WorkflowStatus.WAITING:
            await anyio.sleep(0.01)
            status = await handle.status()
        else:
            status = await runner.run_once(handle)
    return status


async def test_a_caller_gets_the_reply_and_a_retried_caller_the_same(talk_store: Store) -> None:
    client = DurableClient(talk_store)
    handle = await client.start_workflow(approvals, 2)
    runner = WorkflowRunner(talk_store)
    replies: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            assert await drive(runner, handle) is WorkflowStatus.SUCCEEDED

        tg.start_soon(run)
        replies.append(await client.update(handle.id, "approve", {"amount": 5}, update_id="a1"))
        again = await client.update(handle.id, "approve", {"amount": 5}, update_id="a1")
        replies.append(again)
        replies.append(await client.update(handle.id, "approve", {"amount": 7}, timeout=60))
    assert replies == [{"total": 5}, {"total": 5}, {"total": 12}]
    assert await handle.output() == [5, 7], "the retried update was handled once"
    names = [s.step_name for s in await handle.steps()]
    assert names.count("durable.recv_update") == 2
    assert names.count("durable.reply_update") == 2
    # Once it ended, the same update id still answers with its reply.
    assert await client.update(handle.id, "approve", {"amount": 5}, update_id="a1") == {"total": 5}


async def test_a_rejected_update_never_enters_the_history(talk_store: Store) -> None:
    client = DurableClient(talk_store)
    handle = await client.start_workflow(approvals, 1)
    runner = WorkflowRunner(talk_store)
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            assert await drive(runner, handle) is WorkflowStatus.SUCCEEDED

        tg.start_soon(run)
        with pytest.raises(
            UpdateRejectedError,
            match=r"rejected update 'approve' \(bad\): builtins.ValueError: amount must be "
            r"positive, got -3",
        ):
            await client.update(handle.id, "approve", {"amount": -3}, update_id="bad")
        assert await client.update(handle.id, "approve", {"amount": 4}) == {"total": 4}
    assert await handle.output() == [4]
    assert [s.step_name for s in await handle.steps()] == [
        "durable.recv_update",
        "durable.reply_update",
    ]
    with pytest.raises(UpdateRejectedError):  # asked again, the same answer
        await client.update(handle.id, "approve", {"amount": -3}, update_id="bad")


async def test_bad_input_gets_a_clear_error(talk_store: Store) -> None:
    client = DurableClient(talk_store)
    runner = WorkflowRunner(talk_store)
    with pytest.raises(FrameworkError, match=r"recv_update\(\) works only in a workflow body"):
        await recv_update("approve")
    with pytest.raises(FrameworkError, match=r"reply\(\) works only in a workflow body"):
        await UpdateRequest("u", "approve", 1).reply(2)
    handle = await client.start_workflow(approvals, 1)
    for name, update_id, problem in (
        ("", None, "an update name is a non-empty string"),
        ("x" * 201, None, "at most 200 characters"),
        ("approve", "", "an update id is a non-empty string"),
        ("approve", "i" * 65, "at most 64 characters"),
    ):
        with pytest.raises(ConfigurationError, match=problem):
            await client.update(handle.id, name, 1, update_id=update_id)
    with pytest.raises(WorkflowNotFoundError, match="cannot update workflow 'nope'"):
        await client.update("nope", "approve", 1)
    assert await runner.run_once(handle) is WorkflowStatus.WAITING
    with pytest.raises(UpdateTimeoutError, match="update again with update_id='slow'"):
        await client.update(handle.id, "approve", {"amount": 1}, update_id="slow", timeout=0.2)
    with pytest.raises(UpdateConflictError, match=r"'slow' of workflow .* another payload"):
        await client.update(handle.id, "approve", {"amount": 2}, update_id="slow", timeout=0.2)
    assert await drive(runner, handle) is WorkflowStatus.SUCCEEDED
    assert await client.update(handle.id, "approve", {"amount": 1}, update_id="slow") == {
        "total": 1
    }, "the timed-out caller, retried, gets the reply"
    with pytest.raises(UpdateNotHandledError, match="it is succeeded"):
        await client.update(handle.id, "approve", {"amount": 1})

    brief = await client.start_workflow(waits_briefly)
    assert await runner.run_until_complete(brief) is WorkflowStatus.SUCCEEDED
    assert await brief.output() is True, "recv_update returns None at its timeout"


def test_the_sync_client_sends_updates_and_reads_streams(tmp_path: Path) -> None:
    with SyncClient(f"sqlite:///{tmp_path / 'sync.db'}") as client:
        client.apply_schema()
        runner = WorkflowRunner(client.store)
        handle = client.start_workflow(approvals, 1)
        assert client.call(runner.run_once, handle.id) is WorkflowStatus.WAITING
        replies: list[Any] = []
        caller = threading.Thread(
            target=lambda: replies.append(client.update(handle.id, "approve", {"amount": 3}))
        )
        caller.start()
        while caller.is_alive():  # run it once the caller's update woke it
            if handle.status() is WorkflowStatus.PENDING:
                client.call(runner.run_once, handle.id)
            caller.join(0.01)
        assert replies == [{"total": 3}]
        streamed = client.start_workflow(counts_to, 2, True)
        assert client.call(runner.run_until_complete, streamed.id) is WorkflowStatus.SUCCEEDED
        assert list(streamed.read_stream("progress")) == [{"done": 0}, {"done": 1}]
        assert list(streamed.read_stream("progress", offset=1)) == [{"done": 1}]
