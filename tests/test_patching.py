"""Patch markers: a workflow's code changes while instances of it are in flight.

In-process on SQLite and PostgreSQL: ``VERSION`` picks which body the one
registered workflow runs, as a deploy would; the instances started under version
1 are suspended in a durable sleep when the code changes under them.
"""

from __future__ import annotations

from typing import Any

import pytest

import durable_core
from durable_core import (
    ConfigurationError,
    DurableClient,
    FrameworkError,
    StepNameMismatchError,
    WorkflowStatus,
    deprecate_patch,
    patched,
    workflow,
    workflow_step,
)
from durable_core.caller.handle import WorkflowHandle
from durable_core.runtime.config import WorkflowConfig
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

VERSION = {"checkout": 1}


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    return sqlite_or_postgres


@pytest.fixture(autouse=True)
def version_one() -> None:
    VERSION["checkout"] = 1


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0, max_attempts=1))


@workflow_step
async def price(amount: int) -> int:
    return amount


@workflow_step
async def price_with_tax(amount: int) -> int:
    return amount * 120 // 100


@workflow_step
async def receipt(total: int) -> str:
    return f"paid {total}"


@workflow(name="checkout", max_attempts=1)
async def checkout(amount: int) -> str:
    """Version 1 prices, sleeps, then writes a receipt. Version 2 adds tax (a patch);
    version 3 has dropped the untaxed branch (the patch deprecated); version 4 has no
    trace of the patch at all."""
    version = VERSION["checkout"]
    if version == 1:
        total = await price(amount)
    elif version == 2:
        if await patched("tax"):
            total = await price_with_tax(amount)
        else:
            total = await price(amount)
    elif version == 3:
        await deprecate_patch("tax")
        total = await price_with_tax(amount)
    else:
        total = await price_with_tax(amount)
    await durable_core.sleep(60)
    return await receipt(total)


async def step_names(handle: WorkflowHandle[Any]) -> list[str]:
    return [step.step_name for step in await handle.steps()]


PRICE = f"{__name__}.price"
TAXED = f"{__name__}.price_with_tax"
RECEIPT = f"{__name__}.receipt"


async def test_an_instance_in_flight_keeps_the_old_branch_and_a_new_one_takes_the_new(
    store: Store,
) -> None:
    client, run = DurableClient(store), runner(store)
    old = await client.start_workflow(checkout, 100)
    assert await run.run_once(old) is WorkflowStatus.WAITING

    VERSION["checkout"] = 2  # the deploy: the old instance sleeps meanwhile
    new = await client.start_workflow(checkout, 100)
    assert await run.run_until_complete(old) is WorkflowStatus.SUCCEEDED
    assert await run.run_until_complete(new) is WorkflowStatus.SUCCEEDED

    assert await old.output() == "paid 100"
    assert await step_names(old) == [PRICE, "durable.sleep", RECEIPT]
    assert await new.output() == "paid 120"
    assert await step_names(new) == ["durable.patch:tax", TAXED, "durable.sleep", RECEIPT]


@workflow(name="late_change", max_attempts=1)
async def late_change(amount: int) -> int:
    """Sleeps first; version 2 changes what comes after the sleep."""
    await durable_core.sleep(60)
    if VERSION["checkout"] == 2 and await patched("tax"):
        return await price_with_tax(amount)
    return await price(amount)


async def test_an_instance_that_has_not_reached_the_patch_takes_the_new_branch(
    store: Store,
) -> None:
    client, run = DurableClient(store), runner(store)
    handle = await client.start_workflow(late_change, 100)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    VERSION["checkout"] = 2
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 120
    assert await step_names(handle) == ["durable.sleep", "durable.patch:tax", TAXED]


async def test_a_deprecated_patch_replays_marked_histories_and_marks_no_new_one(
    store: Store,
) -> None:
    client, run = DurableClient(store), runner(store)
    VERSION["checkout"] = 2
    marked = await client.start_workflow(checkout, 100)
    assert await run.run_once(marked) is WorkflowStatus.WAITING

    VERSION["checkout"] = 3
    unmarked = await client.start_workflow(checkout, 10)
    assert await run.run_until_complete(marked) is WorkflowStatus.SUCCEEDED
    assert await run.run_until_complete(unmarked) is WorkflowStatus.SUCCEEDED
    assert await marked.output() == "paid 120"
    assert await step_names(marked) == ["durable.patch:tax", TAXED, "durable.sleep", RECEIPT]
    assert await unmarked.output() == "paid 12"
    assert await step_names(unmarked) == [TAXED, "durable.sleep", RECEIPT]


async def test_removing_a_patch_too_early_is_a_determinism_error_naming_both_steps(
    store: Store,
) -> None:
    client, run = DurableClient(store), runner(store)
    VERSION["checkout"] = 2
    handle = await client.start_workflow(checkout, 100)
    assert await run.run_once(handle) is WorkflowStatus.WAITING

    VERSION["checkout"] = 4  # the patch call removed while a marked instance sleeps
    assert await run.run_until_complete(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"].endswith(StepNameMismatchError.__name__)
    assert f"step {TAXED!r} at index 0" in error["message"]
    assert "'durable.patch:tax'" in error["message"]


@workflow(name="patched_twice", max_attempts=1)
async def patched_twice() -> list[bool]:
    first = await patched("p")
    await price(1)
    return [first, await patched("p")]


@workflow_step
async def asks_in_a_step() -> bool:
    return await patched("p")


@workflow(name="patched_in_a_step", max_attempts=1)
async def patched_in_a_step() -> bool:
    return await asks_in_a_step()


async def test_one_answer_per_patch_id_and_misuse_is_refused(store: Store) -> None:
    client, run = DurableClient(store), runner(store)
    twice = await client.start_workflow(patched_twice)
    assert await run.run_until_complete(twice) is WorkflowStatus.SUCCEEDED
    assert await twice.output() == [True, True]
    assert await step_names(twice) == ["durable.patch:p", PRICE]

    in_step = await client.start_workflow(patched_in_a_step)
    assert await run.run_until_complete(in_step) is WorkflowStatus.FAILED
    error = await in_step.error()
    assert error is not None and "patched() works in a workflow body" in error["message"]

    assert await patched("anything") is True  # no workflow: the current code runs
    with pytest.raises(ConfigurationError, match="patch id"):
        await patched("")
    with pytest.raises(FrameworkError, match="patch id"):
        await deprecate_patch("x" * 201)
