"""Flow control's bad input: a debounce key and a queue's per-key limits refuse what they
cannot mean, naming it; a store without the role says so (issue 22)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from durable_core import (
    ConfigurationError,
    DebounceKey,
    DebounceNotSupportedError,
    DurableClient,
    InvalidDurationError,
    Queue,
    RateLimit,
    WorkflowStatus,
    current_store,
    workflow,
)
from durable_core.seams.flow_roles import debouncer_of
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio


@workflow(name="flow_control.noop")
async def noop(n: int) -> int:
    return n


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        (("", 1), ConfigurationError, "debounce key"),
        (("x" * 256, 1), ConfigurationError, "debounce key"),
        ((7, 1), ConfigurationError, "debounce key"),
        (("k", 0), InvalidDurationError, "DebounceKey seconds"),
        (("k", -1), InvalidDurationError, "DebounceKey seconds"),
        (("k", float("nan")), InvalidDurationError, "DebounceKey seconds"),
        (("k", 1, 0), InvalidDurationError, "DebounceKey max_wait"),
        (("k", 1, timedelta(days=-1)), InvalidDurationError, "DebounceKey max_wait"),
    ],
)
def test_a_debounce_key_refuses_what_it_cannot_mean(
    arguments: tuple[Any, ...], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        DebounceKey(*arguments)


def test_a_debounce_key_takes_timedeltas() -> None:
    key = DebounceKey("k", timedelta(seconds=2), max_wait=timedelta(minutes=1))
    assert (key.window_seconds, key.max_wait_seconds) == (2.0, 60.0)


class NoDebounce:
    """A store-like object without the Debouncer role."""

    description = "a store that cannot debounce"


def test_a_store_without_the_role_says_so() -> None:
    with pytest.raises(DebounceNotSupportedError, match="a store that cannot debounce"):
        debouncer_of(NoDebounce())


async def test_a_debounced_start_needs_a_debounce_key(tmp_path: Any) -> None:
    from durable_sqlite import SQLiteStore

    async with SQLiteStore(f"sqlite:///{tmp_path / 'flow.db'}") as store:
        await store.apply_schema()
        client = DurableClient(store)
        with pytest.raises(ConfigurationError, match="must be a DebounceKey"):
            await client.start_workflow_debounced("k", noop, 1)  # type: ignore[arg-type]
        assert await store.list_workflows(limit=5) == []


def test_a_key_rate_limit_must_be_a_rate_limit() -> None:
    with pytest.raises(ConfigurationError, match="key_rate_limit must be a RateLimit"):
        Queue("q", key_rate_limit=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="key_concurrency must be a whole number"):
        Queue("q", key_concurrency=0)


def test_a_queue_with_a_key_limit_is_keyed_and_claims_at_most_its_per_key_cap() -> None:
    assert not Queue("q", concurrency=3).keyed
    paced = Queue("q", key_rate_limit=RateLimit(2, period=1))
    assert (paced.keyed, paced.fleet_limited, paced.per_key) == (True, True, 2)
    both = Queue("q", key_concurrency=5, key_rate_limit=RateLimit(3))
    assert both.per_key == 3


@workflow(name="flow_control.debouncer")
async def debouncer(key: str) -> list[str]:
    client = DurableClient(current_store())
    window = DebounceKey(key, 60)
    first = await client.start_workflow_debounced(window, noop, 1)
    second = await client.start_workflow_debounced(window, noop, 2)
    return [first.id, second.id]


async def test_a_body_debounces_once_per_call_site_across_replays(tmp_path: Any) -> None:
    from durable_sqlite import SQLiteStore

    async with SQLiteStore(f"sqlite:///{tmp_path / 'flow.db'}") as store:
        await store.apply_schema()
        client = DurableClient(store)
        runner = WorkflowRunner(store)
        handle = await client.start_workflow(debouncer, "k")
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        first, second = await handle.output()
        assert first == second
        run = await client.get(first)
        assert json.loads(run.input)["args"] == [2]
        # A fork that keeps both starts (steps 0 and 1) replays them: no new run, no change.
        fork = await client.fork(handle.id, from_step=2)
        assert await runner.run_until_complete(fork) is WorkflowStatus.SUCCEEDED
        assert await fork.output() == [first, first]
        listed = await store.list_workflows(name=noop.name, limit=5)
        assert [r.id for r in listed] == [first]
