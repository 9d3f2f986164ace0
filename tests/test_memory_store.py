"""``InMemoryCallerStore``, the fake store for a user's unit tests, passes the caller role's
contract; code that needs another role refuses it, naming the role."""

from __future__ import annotations

import pytest

from durable_core import DurableClient, RoleNotSupportedError, workflow
from durable_core.contract import CallerContract
from durable_core.seams.roles import CallerStore, lacking
from durable_core.testing import InMemoryCallerStore, WorkflowRunner


@pytest.fixture
def durable_store() -> InMemoryCallerStore:
    return InMemoryCallerStore()


class TestInMemoryCallerStore(CallerContract):
    """Every test of the caller role, on the fake."""


@workflow(name="tests.memory.greet")
async def greet(name: str) -> str:
    return f"hello {name}"


def test_it_plays_the_caller_role_only() -> None:
    store = InMemoryCallerStore()
    assert isinstance(store, CallerStore) and lacking(store, CallerStore) == []
    with pytest.raises(
        RoleNotSupportedError, match=r"the AttemptStore role .*: WorkflowRunner needs it"
    ):
        WorkflowRunner(store)  # type: ignore[arg-type]  # the runner needs more roles


@pytest.mark.anyio
async def test_a_client_starts_reads_and_messages_through_it() -> None:
    store = InMemoryCallerStore()
    client = DurableClient(store)
    handle = await client.start_workflow_with_id("greet-ada", greet, "ada")
    again = await client.start_workflow_with_id("greet-ada", greet, "ada")
    assert again.id == handle.id and list(store.workflows) == ["greet-ada"]
    assert (await handle.info()).name == "tests.memory.greet"
    await client.send(handle.id, {"n": 1}, topic="nudge")
    assert [topic for topic, _ in store.messages[handle.id]] == ["nudge"]
    with pytest.raises(RoleNotSupportedError, match=r"the AdminStore role .*: retry\(\) needs it"):
        await client.retry(handle.id)
