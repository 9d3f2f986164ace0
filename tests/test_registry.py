"""The workflow registry: names, lookups, and duplicates failing worker boot loudly."""

from __future__ import annotations

import types

import anyio
import pytest

from durable_core import (
    DuplicateWorkflowError,
    DurableClient,
    FrameworkError,
    RegistrationError,
    Registry,
    UnknownWorkflowError,
    WorkflowConfig,
    WorkflowStatus,
    default_registry,
    workflow,
)
from durable_core.runtime.worker import WorkflowWorker
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore

FAST = WorkflowConfig(retry_backoff_secs=0)

# Two different functions claiming one explicit name.
DUPLICATES = Registry()


@workflow(name="orders.fulfil", registry=DUPLICATES)
async def fulfil_v1(order_id: int) -> str:
    return f"v1:{order_id}"


@workflow(name="orders.fulfil", registry=DUPLICATES)
async def fulfil_v2(order_id: int) -> str:
    return f"v2:{order_id}"


# One default name (module.qualname) defined twice in a module.
REDEFINED = Registry()


@workflow(registry=REDEFINED)
async def redefined_flow() -> int:
    return 1


_first_redefined = redefined_flow


@workflow(registry=REDEFINED)  # type: ignore[no-redef]  # the redefinition is the case
async def redefined_flow() -> int:
    return 2


# A clean private registry.
PRIVATE = Registry()


@workflow(name="private.greet", registry=PRIVATE)
async def private_greet(name: str) -> str:
    return f"hi {name}"


@workflow
async def checkout(order_id: int) -> int:
    return order_id


def test_default_name_is_module_qualname_in_the_default_registry() -> None:
    assert checkout.name == f"{__name__}.checkout"
    assert default_registry.get(checkout.name) is checkout
    assert checkout.name in default_registry.names()
    assert private_greet.name == "private.greet"
    assert PRIVATE.names() == ["private.greet"]
    assert "private.greet" not in default_registry.names()
    PRIVATE.assert_no_duplicates()


def test_duplicate_names_make_assert_no_duplicates_raise_naming_both_places() -> None:
    with pytest.raises(DuplicateWorkflowError) as caught:
        DUPLICATES.assert_no_duplicates()
    message = str(caught.value)
    assert isinstance(caught.value, RegistrationError) and isinstance(caught.value, FrameworkError)
    assert not caught.value.retryable
    assert "'orders.fulfil'" in message
    assert f"{__name__}.fulfil_v1" in message and f"{__name__}.fulfil_v2" in message
    for fn in (fulfil_v1, fulfil_v2):
        code = fn.fn.__code__
        assert f"{code.co_filename}:{code.co_firstlineno}" in message
    with pytest.raises(DuplicateWorkflowError):
        DUPLICATES.get("orders.fulfil")


def test_redefining_a_workflow_in_one_module_is_a_duplicate() -> None:
    with pytest.raises(DuplicateWorkflowError) as caught:
        REDEFINED.assert_no_duplicates()
    message = str(caught.value)
    name = f"{__name__}.redefined_flow"
    assert f"{name!r} is registered by 2 functions" in message
    lines = {_first_redefined.fn.__code__.co_firstlineno, redefined_flow.fn.__code__.co_firstlineno}
    assert len(lines) == 2
    for line in lines:
        assert f":{line}" in message


def test_the_same_function_registered_twice_is_not_a_duplicate() -> None:
    registry = Registry()
    workflow(name="same", registry=registry)(checkout.fn)
    workflow(name="same", registry=registry)(checkout.fn)
    # The same definition loaded twice (e.g. as __main__ and by module name).
    clone = types.FunctionType(checkout.fn.__code__, checkout.fn.__globals__, checkout.fn.__name__)
    clone.__qualname__ = checkout.fn.__qualname__
    workflow(name="same", registry=registry)(clone)
    registry.assert_no_duplicates()
    assert registry.get("same").fn is checkout.fn


def test_unknown_name_lists_what_is_registered() -> None:
    with pytest.raises(UnknownWorkflowError, match=r"private\.greet") as caught:
        PRIVATE.get("private.nope")
    assert "'private.nope'" in str(caught.value) and "imported" in str(caught.value)
    with pytest.raises(UnknownWorkflowError, match="registered: none"):
        Registry().get("anything")
    registry = Registry()
    workflow(name="temp", registry=registry)(checkout.fn)
    registry.remove("temp")
    assert registry.names() == []


async def test_worker_boot_fails_on_duplicates(sqlite_store: SQLiteStore) -> None:
    worker = WorkflowWorker(sqlite_store, WorkflowConfig(), registry=DUPLICATES)
    with anyio.fail_after(120), pytest.raises(DuplicateWorkflowError, match=r"orders\.fulfil"):
        await worker.run()
    assert worker.claimed_total == 0
    # Duplicates are reported before the store is even asked to claim.
    worker = WorkflowWorker(sqlite_store, WorkflowConfig(), registry=REDEFINED)
    with anyio.fail_after(120), pytest.raises(DuplicateWorkflowError):
        await worker.run()


async def test_runner_uses_the_registry_it_is_given(sqlite_store: SQLiteStore) -> None:
    client = DurableClient(sqlite_store)
    handle = await client.start_workflow(private_greet, "ada")
    assert await WorkflowRunner(sqlite_store, FAST, registry=PRIVATE).run_once(handle) is (
        WorkflowStatus.SUCCEEDED
    )
    assert await handle.output() == "hi ada"

    # The default registry does not know it: the row fails with that message.
    other = await client.start_workflow(private_greet, "bob")
    assert await WorkflowRunner(sqlite_store, FAST).run_once(other) is WorkflowStatus.FAILED
    error = await other.error()
    assert error is not None and error["type"] == "durable_core.errors.UnknownWorkflowError"
    assert "private.greet" in error["message"]

    # A row whose name two functions claim fails rather than picking one at random.
    dup = await client.start_workflow(fulfil_v1, 7)
    runner = WorkflowRunner(sqlite_store, FAST, registry=DUPLICATES)
    assert await runner.run_once(dup) is WorkflowStatus.FAILED
    error = await dup.error()
    assert error is not None and error["type"] == "durable_core.errors.DuplicateWorkflowError"
