"""Retention policies (issue 35): what a policy accepts, which workflows each one covers (a
workflow's own wins over its queue's), and a keeper applying age and count in process."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    InvalidDurationError,
    Keep,
    Queue,
    RegistrationError,
    Registry,
    Retention,
    workflow,
)
from durable_core.contract.retention_contract import settled
from durable_core.contract.support import new_workflow
from durable_core.definitions.retention import parse_age
from durable_core.durations import utcnow
from durable_core.runtime.retention import RetentionKeeper, policies
from durable_core.seams.records import NewWorkflow, WorkflowStatus
from durable_core.sql import schema
from durable_core.sql.erasure import ERASED_TABLES, PAYLOAD_FREE
from durable_core.sql.retention import OWNED
from durable_sqlite import SQLiteStore


def test_ages_are_text_seconds_or_timedeltas_and_never_zero_negative_or_nan() -> None:
    assert parse_age("30d", "x") == 30 * 86400
    assert parse_age("1.5h", "x") == 5400
    assert parse_age("2w", "x") == 14 * 86400
    assert parse_age("45", "x") == 45
    assert parse_age(timedelta(minutes=2), "x") == 120
    for bad in ("-1d", "nan", "inf", "0d", "", "30 days", "1y", float("nan"), -1, 0):
        with pytest.raises(InvalidDurationError, match=r"^x must be a positive"):
            parse_age(bad, "x")


def test_a_policy_says_what_it_keeps_and_refuses_one_that_keeps_nothing() -> None:
    policy = Retention(succeeded="7d", failed=Keep(age="90d", count=100), every="5m")
    assert policy.kept() == {
        "succeeded": Keep(age=7 * 86400),
        "failed": Keep(age=90 * 86400, count=100),
    }
    assert policy.interval == 300
    with pytest.raises(ConfigurationError, match="keeps everything"):
        Retention()
    with pytest.raises(ConfigurationError, match="neither"):
        Keep()
    with pytest.raises(ConfigurationError, match="at least 1"):
        Keep(count=0)
    with pytest.raises(InvalidDurationError, match="Retention succeeded"):
        Retention(succeeded="-1d")
    with pytest.raises(ConfigurationError, match="batch"):
        Retention(succeeded="1d", batch=0)
    with pytest.raises(ConfigurationError, match="must be a Retention"):
        Queue("q", retention="7d")  # type: ignore[arg-type]


def test_a_workflows_policy_wins_over_its_queues() -> None:
    registry = Registry()
    queue = Queue("mail", retention=Retention(succeeded="1d"))
    own = Retention(succeeded="30d")

    @workflow(name="mail.send", queue=queue, registry=registry)
    async def send() -> None: ...

    @workflow(name="mail.audit", queue=queue, registry=registry, retention=own)
    async def audit() -> None: ...

    @workflow(name="other", registry=registry)
    async def other() -> None: ...

    assert policies(registry) == [
        (own, "mail.audit", None, []),
        (queue.retention, None, "mail", ["mail.audit"]),
    ]
    registry.add_queue(Queue("default", retention=Retention(failed="1d")))
    assert [p[2] for p in policies(registry)] == [None, "default", "mail"]
    with pytest.raises(RegistrationError, match="must be a Retention"):
        workflow(name="x", registry=registry, retention="1d")(other.fn)  # type: ignore[call-overload]


@pytest.mark.anyio
async def test_a_keeper_prunes_by_age_and_by_count(sqlite_store: SQLiteStore) -> None:
    registry = Registry()

    @workflow(
        name="kept.by_count",
        registry=registry,
        retention=Retention(succeeded=Keep(count=2), failed=Keep(age="1h")),
    )
    async def by_count() -> None: ...

    store = sqlite_store
    done = [await settled(store, new_workflow("kept.by_count")) for _ in range(4)]
    failed = [
        await settled(store, new_workflow("kept.by_count"), WorkflowStatus.FAILED) for _ in range(2)
    ]
    wf = schema.workflows
    aged = (
        wf.update().where(wf.c.id == failed[0]).values(completed_at=utcnow() - timedelta(hours=2))
    )
    await store.connector.execute(aged, None)
    row = new_workflow()
    elsewhere = await settled(store, NewWorkflow(row.id, "kept.other", row.input, 3))

    keeper = RetentionKeeper(store, registry, worker_id="test")
    [(policy, name, queue, excepted)] = policies(registry)
    await keeper._apply(store, policy, name, queue, excepted)
    assert keeper.removed["workflows"] == 3
    present = [await store.get_workflow(i) is not None for i in [*done, *failed, elsewhere]]
    assert present == [False, False, True, True, False, True, True]


@pytest.mark.anyio
async def test_the_clients_prune_refuses_bad_input(sqlite_store: SQLiteStore) -> None:
    client = DurableClient(sqlite_store)
    for age in ("-1d", "nan", 0, float("nan")):
        with pytest.raises(InvalidDurationError, match="older_than must be a positive"):
            await client.prune(age)
    with pytest.raises(ConfigurationError, match="statuses are some of succeeded"):
        await client.prune("1d", statuses=["running"])
    with pytest.raises(ConfigurationError, match="batch takes 1 to 10000"):
        await client.prune("1d", batch=0)


def test_what_belongs_to_a_workflow_is_read_from_the_schema_and_erasure_covers_it() -> None:
    assert {table.name for table in OWNED} == {
        "workflow_steps",
        "workflow_step_tries",
        "workflow_attempts",
        "workflow_messages",
        "workflow_events",
        "workflow_streams",
        "workflow_updates",
        "workflow_debounces",
        "workflow_attributes",
    }
    # A table added later belongs to a workflow through its key: a prune removes it, and
    # an erasure must say whether it holds payloads.
    assert {*ERASED_TABLES, *PAYLOAD_FREE} == {schema.workflows, *OWNED}
