"""Retry policies and step timeouts, in-process on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from datetime import timedelta

import anyio
import pytest

from durable_core import DurableClient, StepStatus, WorkflowStatus, workflow, workflow_step
from durable_core.definitions.retry import RetryPolicy
from durable_core.errors import (
    ConfigurationError,
    NonRetryableError,
    RegistrationError,
    StepTimeoutError,
)
from durable_core.runtime.config import WorkflowConfig
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

TRIES: defaultdict[str, list[float]] = defaultdict(list)
FAILS: dict[str, int] = {}


class CardDeclined(Exception):
    pass


class Flaky(Exception):
    pass


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    TRIES.clear()
    FAILS.clear()
    return sqlite_or_postgres


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0, max_attempts=3))


def attempt(key: str) -> None:
    """Record a try of ``key``; raise what FAILS plans for it."""
    TRIES[key].append(time.monotonic())
    if FAILS.get(key, 0) > 0:
        FAILS[key] -= 1
        raise Flaky(f"{key} failed")


@workflow_step
async def before(key: str) -> str:
    attempt(f"{key}:before")
    return "before"


@workflow_step(retry=RetryPolicy(max_attempts=4, initial_interval=0.1, backoff_coefficient=2))
async def flaky(key: str) -> str:
    attempt(key)
    return "done"


@workflow(max_attempts=1)
async def uses_flaky(key: str) -> str:
    await before(key)
    return await flaky(key)


async def test_a_step_is_retried_by_its_policy_within_one_attempt(store: Store) -> None:
    FAILS["s"] = 3
    handle = await DurableClient(store).start_workflow(uses_flaky, "s")
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert len(TRIES["s:before"]) == 1, "the earlier step ran once"
    times = TRIES["s"]
    waits = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(waits) == 3
    for waited, planned in zip(waits, (0.1, 0.2, 0.4), strict=True):
        assert planned - 0.01 <= waited < planned + 0.25, waits
    step = (await handle.steps())[1]
    assert (step.status, step.attempts, step.error) == (StepStatus.SUCCEEDED, 4, None)
    assert (await handle.info()).attempts == 1


@workflow_step(retry=RetryPolicy(max_attempts=5, initial_interval=0, give_up_on=(CardDeclined,)))
async def charge(key: str) -> str:
    attempt(key)
    raise CardDeclined(f"card declined for {key}")


@workflow_step(retry=RetryPolicy(max_attempts=5, initial_interval=0, retry_on=(TimeoutError,)))
async def only_timeouts(key: str) -> str:
    attempt(key)
    raise ValueError(f"not a timeout: {key}")


@workflow_step(retry=RetryPolicy(max_attempts=5, initial_interval=0))
async def refuses(key: str) -> str:
    attempt(key)
    raise NonRetryableError(f"never again: {key}")


@workflow
async def fails_with(kind: str) -> str:
    steps = {"give_up": charge, "retry_on": only_timeouts, "non_retryable": refuses}
    return await steps[kind](kind)


@pytest.mark.parametrize(
    ("kind", "error_type"),
    [
        ("give_up", "CardDeclined"),
        ("retry_on", "ValueError"),
        ("non_retryable", "NonRetryableError"),
    ],
)
async def test_errors_the_policy_does_not_retry_fail_the_workflow_after_one_try(
    store: Store, kind: str, error_type: str
) -> None:
    handle = await DurableClient(store).start_workflow(fails_with, kind)
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    assert len(TRIES[kind]) == 1
    info = await handle.info()
    assert info.attempts == 1, "no workflow retry either"
    error = await handle.error()
    assert error is not None and error["type"].endswith(error_type)
    assert error["step_name"].endswith(
        kind.replace("give_up", "charge")
        .replace("retry_on", "only_timeouts")
        .replace("non_retryable", "refuses")
    )


@workflow_step
async def plain_flaky(key: str) -> str:
    attempt(key)
    return "ok"


@workflow(retry=RetryPolicy(max_attempts=3, initial_interval=0.5, backoff_coefficient=3))
async def retried_workflow(key: str) -> str:
    return await plain_flaky(key)


@workflow(retry=RetryPolicy(max_attempts=3, give_up_on=(Flaky,)))
async def gives_up(key: str) -> str:
    return await plain_flaky(key)


async def test_a_workflow_policy_sets_the_budget_and_the_backoff(store: Store) -> None:
    FAILS["w"] = 2
    handle = await DurableClient(store).start_workflow(retried_workflow, "w")
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.PENDING
    first = await handle.info()
    assert first.max_attempts == 3
    assert 0.3 < (first.run_at - first.updated_at).total_seconds() < 0.7
    assert await run.run_once(handle) is WorkflowStatus.PENDING
    second = await handle.info()
    assert 1.2 < (second.run_at - second.updated_at).total_seconds() < 1.8
    assert await run.run_once(handle) is WorkflowStatus.SUCCEEDED
    FAILS["g"] = 1
    gave_up = await DurableClient(store).start_workflow(gives_up, "g")
    assert await run.run_until_complete(gave_up) is WorkflowStatus.FAILED
    assert (await gave_up.info()).attempts == 1


@workflow_step(retry=RetryPolicy(max_attempts=3, initial_interval=3600))
async def hourly(key: str) -> str:
    attempt(key)
    return "at last"


@workflow(max_attempts=1)
async def waits_an_hour_between_tries(key: str) -> str:
    await before(key)
    return await hourly(key)


async def test_a_long_step_retry_suspends_the_workflow(store: Store) -> None:
    FAILS["h"] = 2
    handle = await DurableClient(store).start_workflow(waits_an_hour_between_tries, "h")
    run = runner(store)
    assert await run.run_once(handle) is WorkflowStatus.WAITING
    info = await handle.info()
    assert info.waiting_for == f"retry:{hourly.name}" and info.wake_at is not None
    step = (await handle.steps())[1]
    assert (step.status, step.attempts) == (StepStatus.WAITING, 1)
    assert step.error is not None and "h failed" in step.error
    assert await run.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert run.clock.offset >= timedelta(hours=1.9), "the runner's clock skipped two hours"
    assert len(TRIES["h"]) == 3 and len(TRIES["h:before"]) == 1
    step = (await handle.steps())[1]
    assert (step.status, step.attempts) == (StepStatus.SUCCEEDED, 3)
    assert (await handle.info()).attempts == 1


@workflow_step(timeout=0.2, retry=RetryPolicy(max_attempts=2, initial_interval=0))
async def stuck(key: str) -> str:
    attempt(key)
    await anyio.sleep(3600)
    return "never"


RELEASE = threading.Event()
RETURNED: list[str] = []


@workflow_step(timeout=0.2)
def stuck_in_a_thread(key: str) -> str:
    attempt(key)
    RELEASE.wait(60)  # the test releases it once the workflow has failed
    RETURNED.append(key)
    return "late"


@workflow(max_attempts=1)
async def times_out(key: str) -> str:
    if key == "thread":
        return await stuck_in_a_thread(key)
    return await stuck(key)


@pytest.mark.parametrize("key", ["async", "thread"])
async def test_a_step_timeout_cancels_a_stuck_step(store: Store, key: str) -> None:
    RELEASE.clear()
    RETURNED.clear()
    handle = await DurableClient(store).start_workflow(times_out, key)
    try:
        with anyio.fail_after(120):
            assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
        assert RETURNED == [], "the timeout ended the step while it was still stuck"
    finally:
        RELEASE.set()
    assert len(TRIES[key]) == (2 if key == "async" else 1)
    error = await handle.error()
    assert error is not None and error["type"].endswith(StepTimeoutError.__name__)
    assert "ran longer than its timeout of 0.2s" in error["message"]


def test_bad_policies_and_timeouts_are_refused_at_declaration() -> None:
    with pytest.raises(ConfigurationError, match="max_attempts must be at least 1"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigurationError, match="backoff_coefficient must be >= 1"):
        RetryPolicy(backoff_coefficient=0.5)
    with pytest.raises(ConfigurationError, match="retry_on must be a tuple"):
        RetryPolicy(retry_on=ValueError)  # type: ignore[arg-type]
    with pytest.raises(RegistrationError, match="@workflow_step timeout must be a positive"):
        workflow_step(timeout=0)

    async def body() -> None:
        pass

    with pytest.raises(RegistrationError, match="without max_attempts"):
        workflow(max_attempts=2, retry=RetryPolicy())(body)


def test_the_delay_grows_exponentially_up_to_the_maximum_with_bounded_jitter() -> None:
    policy = RetryPolicy(initial_interval=1, backoff_coefficient=2, max_interval=5)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    jittery = RetryPolicy(initial_interval=10, jitter=0.1)
    assert all(9 <= jittery.delay(1) <= 11 for _ in range(200))


@workflow_step
async def notify_once_broken(key: str) -> str:
    attempt(key)
    if len(TRIES[key]) == 1:
        raise ConnectionError(f"{key}: mail server away")
    return "notified"


@workflow(max_attempts=3)
async def handles_a_declined_card(key: str) -> str:
    try:
        return await charge(key)
    except CardDeclined:
        return await notify_once_broken(f"{key}:notify")


async def test_a_caught_give_up_does_not_stop_later_retries(store: Store) -> None:
    handle = await DurableClient(store).start_workflow(handles_a_declined_card, "caught")
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == "notified"
    assert (await handle.info()).attempts == 2


@workflow_step(timeout=30)
async def raises_its_own_timeout(key: str) -> str:
    attempt(key)
    raise TimeoutError(f"{key}: the payment API timed out")


@workflow(max_attempts=1)
async def own_timeout(key: str) -> str:
    return await raises_its_own_timeout(key)


async def test_a_steps_own_timeout_error_is_not_mistaken_for_the_step_timeout(
    store: Store,
) -> None:
    handle = await DurableClient(store).start_workflow(own_timeout, "own")
    assert await runner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"] == "builtins.TimeoutError"
    assert error["message"] == "own: the payment API timed out"
