"""PostgresStore against a real PostgreSQL: claim, fencing, NOTIFY, errors, the engine."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import asyncpg
import pytest
import sqlalchemy as sa

from durable_core import DurableClient, workflow, workflow_step
from durable_core.caller.backends import store_from_url
from durable_core.definitions.queues import Queue, Route
from durable_core.errors import (
    CorruptRecordError,
    InvalidDatabaseURLError,
    InvalidStateError,
    LeaseLostError,
    SchemaMissingError,
    StoreError,
    StoreUnavailableError,
    WorkflowConflictError,
    WorkflowNotFoundError,
)
from durable_core.seams.records import (
    ClaimedWorkflow,
    NewWorkflow,
    Settlement,
    StepStatus,
    Wait,
    WaitKind,
    WorkflowStatus,
)
from durable_core.seams.store import Claimer, Store
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from durable_postgres.connector import compile_statement
from durable_postgres.dialect import PostgresStatements
from tests.conftest import scratch_name

ROUTES = [Route(Queue("default"), ("tests.flow",), 1000)]
"""Every row these tests claim."""
HOUR = 3600.0
"""A wait's timeout no test lasts: the wait can end only by what the test waits for."""
SAFETY = 120.0
"""How long before a test is called hung: never a measure of speed."""

pytestmark = pytest.mark.anyio


def plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


def with_database(url: str, name: str) -> str:
    return re.sub(r"/[^/?]+(\?|$)", lambda m: f"/{name}{m.group(1)}", plain(url), count=1)


def new(count: int = 1, *, delay: float = 0.0, name: str = "tests.flow") -> list[NewWorkflow]:
    return [
        NewWorkflow(
            id=str(uuid.uuid4()),
            name=name,
            input=json.dumps([i]),
            max_attempts=3,
            delay_seconds=delay,
        )
        for i in range(count)
    ]


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    """An open PostgresStore on the test database, schema applied, tables emptied."""
    opened = PostgresStore(postgres_url)
    await opened.open()
    await opened.apply_schema()
    conn = await asyncpg.connect(plain(postgres_url))
    try:
        await conn.execute(f"TRUNCATE {WORKFLOW_TABLES}")
    finally:
        await conn.close()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def other(store: PostgresStore, postgres_url: str) -> AsyncIterator[PostgresStore]:
    """A second store with its own pool on the same (already emptied) database."""
    async with PostgresStore(postgres_url) as second:
        yield second


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection for asserting on what the database holds."""
    conn = await asyncpg.connect(plain(postgres_url))
    try:
        yield conn
    finally:
        await conn.close()


async def claim_one(
    store: PostgresStore, worker_id: str = "w1", lease: float = 30
) -> ClaimedWorkflow:
    claimed = await store.claim(worker_id=worker_id, limit=1, lease_seconds=lease, routes=ROUTES)
    assert len(claimed) == 1
    return claimed[0]


# -- the protocols and URLs ---------------------------------------------------


def test_implements_store_and_claimer() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:5432/x")
    assert isinstance(store, Store)
    assert isinstance(store, Claimer)


def test_url_forms_and_description_hide_the_password() -> None:
    for url in (
        "postgresql://alice:s3cret@db.example:5433/app",
        "postgres://alice:s3cret@db.example:5433/app",
        "postgresql+asyncpg://alice:s3cret@db.example:5433/app",
    ):
        store = PostgresStore(url)
        assert store.description == "PostgreSQL postgresql://alice@db.example:5433/app"
        assert "s3cret" not in store.description
    with pytest.raises(InvalidDatabaseURLError, match="psycopg"):
        PostgresStore("postgresql+psycopg://u@h/db")
    with pytest.raises(InvalidDatabaseURLError, match="not a PostgreSQL URL"):
        PostgresStore("mysql://u@h/db")
    with pytest.raises(InvalidDatabaseURLError, match="malformed"):
        PostgresStore("postgresql://u@h:notaport/db")


def test_plugin_resolves_postgres_urls() -> None:
    for url in ("postgresql://u@h/db", "postgres://u@h/db", "postgresql+asyncpg://u@h/db"):
        assert isinstance(store_from_url(url), PostgresStore)
    with pytest.raises(InvalidDatabaseURLError, match="psycopg"):
        store_from_url("postgresql+psycopg://u@h/db")


# -- enqueue and read side ----------------------------------------------------


async def test_enqueue_and_get_round_trip(store: PostgresStore, db: asyncpg.Connection) -> None:
    now_rows = new(2)
    later = new(1, delay=90)
    await store.enqueue(now_rows + later)
    server_now = await db.fetchval("SELECT now()")

    record = await store.get_workflow(now_rows[0].id)
    assert record is not None
    assert record.id == now_rows[0].id
    assert record.name == "tests.flow"
    assert record.status is WorkflowStatus.PENDING
    assert record.input == "[0]"
    assert (record.output, record.error, record.completed_at) == (None, None, None)
    assert (record.attempts, record.max_attempts) == (0, 3)
    assert (record.locked_by, record.locked_until) == (None, None)
    assert record.run_at.utcoffset() == timedelta(0)
    assert abs((server_now - record.run_at).total_seconds()) < 5
    assert record.created_at == record.updated_at == record.run_at

    delayed = await store.get_workflow(later[0].id)
    assert delayed is not None
    assert delayed.run_at - delayed.created_at == timedelta(seconds=90)
    assert await store.get_workflow("no-such-id") is None


async def test_enqueue_batch_is_atomic(store: PostgresStore, db: asyncpg.Connection) -> None:
    rows = new(3)
    too_wide = NewWorkflow(id="x" * 300, name="tests.flow", input="[]", max_attempts=1)
    with pytest.raises(StoreError, match="enqueue on PostgreSQL") as caught:
        await store.enqueue([*rows, too_wide])
    assert not isinstance(caught.value, StoreUnavailableError)
    assert isinstance(caught.value.__cause__, asyncpg.StringDataRightTruncationError)
    assert await db.fetchval("SELECT count(*) FROM workflows") == 0
    clash = NewWorkflow(id=rows[0].id, name="tests.flow", input="[]", max_attempts=1)
    with pytest.raises(WorkflowConflictError, match="cannot start it again"):
        await store.enqueue([*rows, clash])
    assert await db.fetchval("SELECT count(*) FROM workflows") == 0
    await store.enqueue([])
    await store.enqueue(new(1000))
    assert await db.fetchval("SELECT count(*) FROM workflows") == 1000


async def test_list_workflows_newest_first_and_filtered(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    first, second = new(1, name="a"), new(1, name="b")
    await store.enqueue(first)
    await store.enqueue(second)
    await store.enqueue(new(1, name="a"))
    await db.execute("UPDATE workflows SET status = 'failed' WHERE id = $1", second[0].id)

    listed = await store.list_workflows()
    assert [r.name for r in listed] == ["a", "b", "a"]
    assert listed[-1].id == first[0].id
    assert [r.id for r in await store.list_workflows(status=WorkflowStatus.FAILED)] == [
        second[0].id
    ]
    assert len(await store.list_workflows(name="a")) == 2
    assert await store.list_workflows(name="a", status=WorkflowStatus.FAILED) == []
    assert len(await store.list_workflows(limit=1)) == 1


async def test_corrupt_rows_raise_corrupt_record_error(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    rows = new(2)
    await store.enqueue(rows)
    await db.execute("UPDATE workflows SET status = 'bogus' WHERE id = $1", rows[0].id)
    with pytest.raises(CorruptRecordError, match="unknown status 'bogus'"):
        await store.get_workflow(rows[0].id)

    claimed = await claim_one(store)
    assert claimed.id == rows[1].id
    await store.start_step(claimed.lease, 0, "s", "[]")
    await db.execute("UPDATE workflow_steps SET status = 'weird'")
    with pytest.raises(CorruptRecordError, match=r"step 0 of workflow .* unknown status 'weird'"):
        await store.load_steps(claimed.id)
    await db.execute(
        "UPDATE workflows SET status = 'pending', lock_token = NULL WHERE id = $1", claimed.id
    )
    # A bad step row does not fail the claim; the executor loads (and fails) it itself.
    again = await claim_one(store)
    assert again.id == claimed.id
    assert again.steps is None


# -- claiming -----------------------------------------------------------------


async def test_claim_takes_at_most_limit_and_sets_the_lease(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await store.enqueue(new(5))
    claimed = await store.claim(worker_id="worker-a", limit=3, lease_seconds=45, routes=ROUTES)
    server_now = await db.fetchval("SELECT now()")
    assert len(claimed) == 3
    assert len({c.lease.token for c in claimed}) == 3
    for item in claimed:
        assert item.attempts == 1
        assert item.max_attempts == 3
        assert item.steps == ()
        assert item.lease.worker_id == "worker-a"
        assert item.lease.workflow_id == item.id
        row = await db.fetchrow("SELECT * FROM workflows WHERE id = $1", item.id)
        assert row["status"] == "running"
        assert row["attempts"] == 1
        assert row["locked_by"] == "worker-a"
        assert row["lock_token"] == item.lease.token
        assert abs((row["locked_until"] - server_now).total_seconds() - 45) < 5
    assert (
        len(await store.claim(worker_id="worker-a", limit=10, lease_seconds=45, routes=ROUTES)) == 2
    )
    assert await store.claim(worker_id="worker-a", limit=10, lease_seconds=45, routes=ROUTES) == []
    assert await store.claim(worker_id="worker-a", limit=0, lease_seconds=45, routes=ROUTES) == []


async def test_claim_returns_cached_steps_inline(store: PostgresStore) -> None:
    await store.enqueue(new(1))
    first = await claim_one(store)
    await store.start_step(first.lease, 0, "fetch", '["in0"]')
    await store.complete_step(first.lease, 0, '"out0"')
    await store.start_step(first.lease, 1, "send", '["in1"]', path="2.1")
    await store.fail_step(first.lease, 1, '{"message": "boom"}')
    await store.settle(
        Settlement(first.lease, WorkflowStatus.PENDING, error="{}", retry_delay_seconds=0)
    )

    second = await claim_one(store)
    assert second.id == first.id
    assert second.attempts == 2
    assert second.steps is not None
    assert list(second.steps) == await store.load_steps(first.id)
    fetch, send = second.steps
    assert (fetch.step_index, fetch.step_name, fetch.status) == (0, "fetch", StepStatus.SUCCEEDED)
    assert (fetch.input, fetch.output, fetch.error) == ('["in0"]', '"out0"', None)
    assert (send.step_index, send.status, send.error) == (
        1,
        StepStatus.FAILED,
        '{"message": "boom"}',
    )
    assert send.output is None
    assert (fetch.path, send.path) == (None, "2.1")


async def test_concurrent_claimers_never_share_a_row(
    store: PostgresStore, other: PostgresStore, db: asyncpg.Connection
) -> None:
    total = 300
    # A store's first claims connect its listener and its pool's connections (one at
    # first): made on the empty queue, eight at once as below, so that neither claimer
    # drains the queue while the other is still connecting (seen on a busy machine).
    async with anyio.create_task_group() as warming:
        for claimer in (store, other):
            for _ in range(8):
                warming.start_soon(
                    functools.partial(
                        claimer.claim, worker_id="warm", limit=1, lease_seconds=60, routes=ROUTES
                    )
                )
    await store.enqueue(new(total))
    got: dict[str, list[ClaimedWorkflow]] = {"a": [], "b": []}

    async def drain(claimer: PostgresStore, worker: str) -> None:
        while True:
            batch = await claimer.claim(worker_id=worker, limit=7, lease_seconds=60, routes=ROUTES)
            if not batch:
                return
            got[worker].extend(batch)

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(drain, store, "a")
            group.start_soon(drain, other, "b")

    ids = [c.id for c in got["a"] + got["b"]]
    assert len(ids) == total
    assert len(set(ids)) == total
    assert got["a"] and got["b"]
    rows = await db.fetch("SELECT id, status, attempts, locked_by, lock_token FROM workflows")
    by_id = {row["id"]: row for row in rows}
    for worker, items in got.items():
        for item in items:
            row = by_id[item.id]
            assert (row["status"], row["attempts"]) == ("running", 1)
            assert row["locked_by"] == worker
            assert row["lock_token"] == item.lease.token


async def test_not_yet_due_rows_are_not_claimed(store: PostgresStore) -> None:
    (later,) = new(1, delay=60)
    await store.enqueue([later])
    assert await store.claim(worker_id="w", limit=5, lease_seconds=30, routes=ROUTES) == []
    assert await store.acquire(later.id, worker_id="w", lease_seconds=30) is None
    forced = await store.acquire(later.id, worker_id="w", lease_seconds=30, due_only=False)
    assert forced is not None
    assert forced.attempts == 1
    assert forced.steps == ()


async def test_acquire_takes_one_runnable_workflow(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    (row,) = new(1)
    await store.enqueue([row])
    claimed = await store.acquire(row.id, worker_id="runner", lease_seconds=30)
    assert claimed is not None
    assert (claimed.id, claimed.name, claimed.input, claimed.attempts) == (
        row.id,
        row.name,
        row.input,
        1,
    )
    assert await db.fetchval("SELECT lock_token FROM workflows") == claimed.lease.token
    assert await store.acquire(row.id, worker_id="runner", lease_seconds=30) is None
    assert await store.acquire("missing", worker_id="runner", lease_seconds=30) is None


async def test_expired_lease_is_reclaimed_with_a_new_token(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await store.enqueue(new(1))
    old = await claim_one(store, "crashed", lease=0.2)
    assert await store.claim(worker_id="other", limit=5, lease_seconds=30, routes=ROUTES) == []
    await anyio.sleep(0.4)
    new_owner = await claim_one(store, "other")
    assert new_owner.id == old.id
    assert new_owner.attempts == 2
    assert new_owner.lease.token != old.lease.token
    row = await db.fetchrow("SELECT * FROM workflows")
    assert (row["status"], row["attempts"], row["locked_by"]) == ("running", 2, "other")
    assert row["lock_token"] == new_owner.lease.token


async def test_acquire_reclaims_an_expired_lease(store: PostgresStore) -> None:
    await store.enqueue(new(1))
    old = await claim_one(store, lease=0.2)
    assert await store.acquire(old.id, worker_id="x", lease_seconds=30) is None
    await anyio.sleep(0.4)
    taken = await store.acquire(old.id, worker_id="x", lease_seconds=30)
    assert taken is not None
    assert taken.attempts == 2
    assert taken.lease.token != old.lease.token


# -- fencing ------------------------------------------------------------------


async def test_old_lease_is_fenced_after_reclaim(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await store.enqueue(new(1))
    old = await claim_one(store, "crashed", lease=0.2)
    await store.start_step(old.lease, 0, "first", '["x"]')
    await anyio.sleep(0.4)
    current = await claim_one(store, "current")
    await store.start_step(current.lease, 0, "first", '["x"]')
    await store.complete_step(current.lease, 0, '"new-output"')
    await store.start_step(current.lease, 1, "second", '["y"]')

    steps_before = await db.fetch("SELECT * FROM workflow_steps ORDER BY step_index")
    workflow_before = await db.fetchrow("SELECT * FROM workflows")

    stale_writes: dict[str, Callable[[], Awaitable[None]]] = {
        "start_step": lambda: store.start_step(old.lease, 0, "first", '["x"]'),
        "start_step at a new index": lambda: store.start_step(old.lease, 2, "third", "[]"),
        "complete_step": lambda: store.complete_step(old.lease, 1, '"stale"'),
        "fail_step": lambda: store.fail_step(old.lease, 0, '{"stale": true}'),
        "heartbeat": lambda: store.heartbeat(old.lease, 300),
        "settle succeeded": lambda: store.settle(
            Settlement(old.lease, WorkflowStatus.SUCCEEDED, output='"stale"')
        ),
        "settle failed": lambda: store.settle(
            Settlement(old.lease, WorkflowStatus.FAILED, error="{}")
        ),
        "settle pending": lambda: store.settle(
            Settlement(old.lease, WorkflowStatus.PENDING, error="{}")
        ),
    }
    for what, write in stale_writes.items():
        try:
            await write()
        except LeaseLostError as exc:
            assert f"worker crashed no longer holds workflow {old.id}" in str(exc), what
        else:
            pytest.fail(f"{what} with the reclaimed lease was accepted")

    assert await db.fetch("SELECT * FROM workflow_steps ORDER BY step_index") == steps_before
    assert await db.fetchrow("SELECT * FROM workflows") == workflow_before
    assert [s["attempts"] for s in steps_before] == [2, 1]
    assert steps_before[0]["output"] == '"new-output"'
    assert workflow_before["lock_token"] == current.lease.token


async def test_step_writes_for_unknown_workflow_or_token_are_refused(store: PostgresStore) -> None:
    await store.enqueue(new(1))
    claimed = await claim_one(store)
    forged = type(claimed.lease)(claimed.id, str(uuid.uuid4()), "forger")
    with pytest.raises(LeaseLostError, match="recording step 0"):
        await store.start_step(forged, 0, "s", "[]")
    with pytest.raises(LeaseLostError, match="complete_step for step 5"):
        await store.complete_step(claimed.lease, 5, '"no such step"')
    assert await store.load_steps(claimed.id) == []


async def test_start_step_rerun_resets_the_row(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await store.enqueue(new(1))
    claimed = await claim_one(store)
    await store.start_step(claimed.lease, 0, "s", '["a"]')
    await store.fail_step(claimed.lease, 0, '{"e": 1}')
    failed = await db.fetchrow("SELECT * FROM workflow_steps")
    assert (failed["status"], failed["error"], failed["attempts"]) == ("failed", '{"e": 1}', 1)
    assert failed["completed_at"] is not None

    await store.start_step(claimed.lease, 0, "s", '["b"]')
    rerun = await db.fetchrow("SELECT * FROM workflow_steps")
    assert (rerun["status"], rerun["input"], rerun["attempts"]) == ("running", '["b"]', 2)
    assert (rerun["output"], rerun["error"], rerun["completed_at"]) == (None, None, None)

    await store.complete_step(claimed.lease, 0, '"ok"')
    (step,) = await store.load_steps(claimed.id)
    assert (step.status, step.output, step.error, step.attempts) == (
        StepStatus.SUCCEEDED,
        '"ok"',
        None,
        2,
    )


async def test_heartbeat_extends_the_lease(store: PostgresStore, db: asyncpg.Connection) -> None:
    await store.enqueue(new(1))
    claimed = await claim_one(store, lease=5)
    await store.heartbeat(claimed.lease, 600)
    remaining = await db.fetchval("SELECT extract(epoch FROM locked_until - now()) FROM workflows")
    assert 590 < remaining <= 600


async def test_settle_pending_delays_the_retry_by_server_time(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await store.enqueue(new(1))
    claimed = await claim_one(store)
    await store.settle(
        Settlement(
            claimed.lease, WorkflowStatus.PENDING, error='{"m": "x"}', retry_delay_seconds=120
        )
    )
    row = await db.fetchrow("SELECT *, extract(epoch FROM run_at - now()) AS due_in FROM workflows")
    assert 118 < row["due_in"] <= 120
    assert (row["status"], row["error"], row["output"]) == ("pending", '{"m": "x"}', None)
    assert (row["locked_by"], row["lock_token"], row["locked_until"]) == (None, None, None)
    assert row["completed_at"] is None
    assert await store.claim(worker_id="w", limit=5, lease_seconds=30, routes=ROUTES) == []


async def test_settle_terminal_sets_completed_at(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await store.enqueue(new(2))
    one, two = await store.claim(worker_id="w", limit=2, lease_seconds=30, routes=ROUTES)
    await store.settle(Settlement(one.lease, WorkflowStatus.SUCCEEDED, output='"done"'))
    await store.settle(Settlement(two.lease, WorkflowStatus.FAILED, error='{"m": "bad"}'))
    done = await store.get_workflow(one.id)
    failed = await store.get_workflow(two.id)
    assert done is not None and failed is not None
    assert (done.status, done.output, done.error) == (WorkflowStatus.SUCCEEDED, '"done"', None)
    assert (failed.status, failed.error) == (WorkflowStatus.FAILED, '{"m": "bad"}')
    for record in (done, failed):
        assert record.completed_at is not None
        assert (record.locked_by, record.locked_until) == (None, None)
    assert await db.fetchval("SELECT count(lock_token) FROM workflows") == 0


# -- retry and cancel ---------------------------------------------------------


async def test_retry_and_cancel(store: PostgresStore, db: asyncpg.Connection) -> None:
    await store.enqueue(new(1))
    (row,) = await store.list_workflows()
    with pytest.raises(InvalidStateError, match="is pending; only failed or cancelled"):
        await store.retry_workflow(row.id)
    with pytest.raises(WorkflowNotFoundError, match="no workflow with id 'nope'"):
        await store.retry_workflow("nope")
    with pytest.raises(WorkflowNotFoundError, match="no workflow with id 'nope'"):
        await store.cancel_workflow("nope")

    claimed = await claim_one(store)
    await store.start_step(claimed.lease, 0, "s", "[]")
    await store.complete_step(claimed.lease, 0, '"kept"')
    await store.cancel_workflow(row.id)
    cancelled = await store.get_workflow(row.id)
    assert cancelled is not None
    assert cancelled.status is WorkflowStatus.CANCELLED
    assert cancelled.completed_at is not None
    assert await db.fetchval("SELECT lock_token FROM workflows") is None
    with pytest.raises(LeaseLostError):
        await store.heartbeat(claimed.lease, 30)
    with pytest.raises(InvalidStateError, match="is cancelled; only pending, running or waiting"):
        await store.cancel_workflow(row.id)

    await store.retry_workflow(row.id)
    retried = await store.get_workflow(row.id)
    assert retried is not None
    assert (retried.status, retried.attempts, retried.completed_at) == (
        WorkflowStatus.PENDING,
        0,
        None,
    )
    again = await claim_one(store)
    assert again.attempts == 1
    assert again.steps is not None and again.steps[0].output == '"kept"'
    await store.settle(Settlement(again.lease, WorkflowStatus.FAILED, error="{}"))
    await store.retry_workflow(row.id)
    assert (await claim_one(store)).attempts == 1


# -- LISTEN/NOTIFY --------------------------------------------------------------


async def test_enqueue_wakes_a_waiting_worker(store: PostgresStore, other: PostgresStore) -> None:
    assert await store.claim(worker_id="w", limit=1, lease_seconds=30, routes=ROUTES) == []
    woke: list[bool] = []
    sent = False

    async def waiter() -> None:
        await store.wait_for_work(HOUR)  # only the enqueue can end it
        woke.append(sent)

    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.sleep(0.2)
            sent = True
            await other.enqueue(new(1))
    assert woke == [True], "woken by the enqueue, not before it"


async def test_wait_for_work_times_out_and_remembers_notifications(
    store: PostgresStore, other: PostgresStore
) -> None:
    started = time.monotonic()
    with anyio.fail_after(SAFETY):
        await store.wait_for_work(0.4)
    assert time.monotonic() - started > 0.35

    await other.enqueue(new(1))
    await anyio.sleep(0.2)  # the notification lands while nobody waits
    with anyio.fail_after(SAFETY):
        await store.wait_for_work(HOUR)  # returns on it: only the notification can end it
    started = time.monotonic()
    await store.wait_for_work(0.3)  # consumed: this one times out
    assert time.monotonic() - started > 0.25


async def test_a_claim_starts_listening_so_no_enqueue_goes_unheard(
    store: PostgresStore, other: PostgresStore, db: asyncpg.Connection
) -> None:
    assert await listener_pids(db) == []
    assert await store.claim(worker_id="w", limit=5, lease_seconds=30, routes=ROUTES) == []
    assert len(await listener_pids(db)) == 1
    await other.enqueue(new(1))  # between the empty claim and the wait
    with anyio.fail_after(SAFETY):
        await store.wait_for_work(HOUR)  # only the enqueue can end it
    assert len(await store.claim(worker_id="w", limit=5, lease_seconds=30, routes=ROUTES)) == 1


async def test_retry_wakes_a_waiting_worker(store: PostgresStore, other: PostgresStore) -> None:
    await store.enqueue(new(1))
    claimed = await claim_one(store)
    await store.settle(Settlement(claimed.lease, WorkflowStatus.FAILED, error="{}"))
    assert await store.claim(worker_id="w", limit=1, lease_seconds=30, routes=ROUTES) == []
    woke: list[bool] = []
    retried = False

    async def waiter() -> None:
        await store.wait_for_work(HOUR)  # only the retry can end it
        woke.append(retried)

    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.sleep(0.1)
            retried = True
            await other.retry_workflow(claimed.id)
    assert woke == [True]


async def listener_pids(db: asyncpg.Connection) -> list[int]:
    rows = await db.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
    )
    return [row["pid"] for row in rows]


async def test_listener_survives_backend_termination(
    store: PostgresStore, other: PostgresStore, db: asyncpg.Connection
) -> None:
    assert (
        await store.claim(worker_id="w", limit=1, lease_seconds=30, routes=ROUTES) == []
    )  # starts listening
    (pid,) = await listener_pids(db)
    assert await db.fetchval("SELECT pg_terminate_backend($1)", pid)

    # The lost connection is noticed and re-opened; the wait then returns since
    # notifications may have been missed meanwhile.
    with anyio.fail_after(SAFETY):
        await store.wait_for_work(HOUR)
    new_pids = await listener_pids(db)
    assert len(new_pids) == 1 and new_pids != [pid]

    woke: list[bool] = []
    sent = False

    async def waiter() -> None:
        await store.wait_for_work(HOUR)  # only the enqueue can end it
        woke.append(sent)

    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.sleep(0.2)
            sent = True
            await other.enqueue(new(1))
    assert woke == [True]


async def test_listen_off_polls_only(
    postgres_url: str, store: PostgresStore, other: PostgresStore, db: asyncpg.Connection
) -> None:
    separator = "&" if "?" in postgres_url else "?"
    async with PostgresStore(f"{postgres_url}{separator}durable_listen=off") as polling:
        assert await polling.claim(worker_id="w", limit=1, lease_seconds=30, routes=ROUTES) == []
        assert await listener_pids(db) == []
        started = time.monotonic()
        async with anyio.create_task_group() as group:
            group.start_soon(polling.wait_for_work, 0.6)
            await anyio.sleep(0.1)
            await other.enqueue(new(1))
        assert time.monotonic() - started > 0.55
        assert (
            len(await polling.claim(worker_id="w", limit=1, lease_seconds=30, routes=ROUTES)) == 1
        )
    with pytest.raises(InvalidDatabaseURLError, match="durable_listen"):
        PostgresStore(f"{postgres_url}{separator}durable_listen=maybe")


async def test_wait_for_work_ends_when_the_next_sleep_or_delayed_start_falls_due(
    store: PostgresStore,
) -> None:
    [sleeper] = new(1)
    await store.enqueue([sleeper])
    claimed = await store.acquire(sleeper.id, worker_id="w", lease_seconds=30)
    assert claimed is not None
    deadline = datetime.now(UTC) + timedelta(seconds=0.5)
    wait = Wait(WaitKind.SLEEP, "", deadline, 0, "durable.sleep", "[]")
    assert await store.suspend(claimed.lease, [wait])
    [woken] = await claim_after_waits(store)  # woken by the sleep's end, not the timeout
    assert woken.id == sleeper.id and datetime.now(UTC) >= deadline
    [delayed] = new(1, delay=0.6)
    await store.enqueue([delayed])
    [woken] = await claim_after_waits(store)  # woken when the delayed start is due
    assert woken.id == delayed.id


async def claim_after_waits(store: PostgresStore) -> list[ClaimedWorkflow]:
    """Claim, waiting for work (an hour at a time) while nothing is due, as a worker does.

    Each wait ends on an event (a notification, the next due time): never many of them."""
    waits = 0
    with anyio.fail_after(SAFETY):
        while not (
            got := await store.claim(worker_id="w", limit=5, lease_seconds=30, routes=ROUTES)
        ):
            waits += 1
            assert waits <= 4, "wait_for_work returns without an event"
            await store.wait_for_work(HOUR)
    return got


async def test_a_sleep_that_ended_is_claimed_before_newer_work(store: PostgresStore) -> None:
    [sleeper] = new(1)
    await store.enqueue([sleeper])
    claimed = await store.acquire(sleeper.id, worker_id="w", lease_seconds=30)
    assert claimed is not None
    deadline = datetime.now(UTC) + timedelta(seconds=0.1)
    wait = Wait(WaitKind.SLEEP, "", deadline, 0, "durable.sleep", "[]")
    assert await store.suspend(claimed.lease, [wait])
    await anyio.sleep(0.2)
    await store.enqueue(new(20))  # due now, after the sleep ended
    first = await store.claim(worker_id="w", limit=5, lease_seconds=30, routes=ROUTES)
    assert sleeper.id in {c.id for c in first}, "the oldest due work goes first"


async def test_wait_for_work_without_a_server_sleeps_instead_of_raising() -> None:
    async with PostgresStore("postgresql://postgres@127.0.0.1:1/x", min_size=0) as store:
        started = time.monotonic()
        with anyio.fail_after(SAFETY):
            await store.wait_for_work(0.5)
            await store.wait_for_work(0.3)
        assert time.monotonic() - started > 0.7


# -- errors and recovery ------------------------------------------------------


async def test_unreachable_server_is_store_unavailable() -> None:
    with pytest.raises(
        StoreUnavailableError, match=r"open on PostgreSQL .*127\.0\.0\.1:1"
    ) as caught:
        await PostgresStore("postgresql://postgres@127.0.0.1:1/x").open()
    assert isinstance(caught.value.__cause__, OSError)

    lazy = PostgresStore("postgresql://postgres@127.0.0.1:1/x", min_size=0)
    await lazy.open()
    try:
        with pytest.raises(StoreUnavailableError, match="get_workflow on PostgreSQL"):
            await lazy.get_workflow("x")
        with pytest.raises(StoreUnavailableError, match="claim on PostgreSQL"):
            await lazy.claim(worker_id="w", limit=1, lease_seconds=1, routes=ROUTES)
        with pytest.raises(StoreUnavailableError, match="apply_schema on PostgreSQL"):
            await lazy.apply_schema()
    finally:
        await lazy.close()


async def test_a_deadlock_is_a_conflict_worth_retrying(
    store: PostgresStore, postgres_url: str
) -> None:
    """A transaction PostgreSQL rolls back for a deadlock (what a claim met when the
    tables were dropped under a running worker) is retried as an outage is, not fatal."""
    first = await asyncpg.connect(plain(postgres_url))
    second = await asyncpg.connect(plain(postgres_url))
    try:
        await first.execute(
            "DROP TABLE IF EXISTS deadlock_probe; CREATE TABLE deadlock_probe (id int PRIMARY KEY);"
            "INSERT INTO deadlock_probe VALUES (1), (2)"
        )
        for conn in (first, second):
            await conn.execute("BEGIN")
        await first.execute("UPDATE deadlock_probe SET id = id WHERE id = 1")
        await second.execute("UPDATE deadlock_probe SET id = id WHERE id = 2")
        ended = await asyncio.gather(
            first.execute("UPDATE deadlock_probe SET id = id WHERE id = 2"),
            second.execute("UPDATE deadlock_probe SET id = id WHERE id = 1"),
            return_exceptions=True,
        )
        [deadlock] = [e for e in ended if isinstance(e, BaseException)]
        assert isinstance(deadlock, asyncpg.DeadlockDetectedError)
        with pytest.raises(
            StoreUnavailableError,
            match=r"claim on PostgreSQL .* rolled back by a conflict with another "
            r"transaction, nothing written: DeadlockDetectedError",
        ) as caught:
            store._raise_translated("claim", deadlock)
        assert caught.value.__cause__ is deadlock
    finally:
        for conn in (first, second):
            await conn.close()
        cleanup = await asyncpg.connect(plain(postgres_url))
        try:
            await cleanup.execute("DROP TABLE IF EXISTS deadlock_probe")
        finally:
            await cleanup.close()


async def test_store_not_open_is_a_store_error() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:5432/x")
    with pytest.raises(StoreError, match="is not open"):
        await store.get_workflow("x")
    with pytest.raises(StoreError, match="is not open"):
        await store.wait_for_work(0.1)


@pytest.fixture
async def empty_database_url(postgres_url: str) -> str:
    """A database with no durable tables in it."""
    name = scratch_name("durable_pg_empty")
    url = with_database(postgres_url, name)
    admin = await asyncpg.connect(with_database(postgres_url, "postgres"))
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {WORKFLOW_TABLES}, durable_schema_versions")
    finally:
        await conn.close()
    return url


async def test_missing_tables_are_schema_missing(empty_database_url: str) -> None:
    async with PostgresStore(empty_database_url) as store:
        with pytest.raises(SchemaMissingError, match="apply_schema") as caught:
            await store.get_workflow("x")
        assert "the durable tables are missing" in str(caught.value)
        assert isinstance(caught.value.__cause__, asyncpg.UndefinedTableError)
        with pytest.raises(SchemaMissingError, match=r"^enqueue on PostgreSQL"):
            await store.enqueue(new(1))
        with pytest.raises(SchemaMissingError, match=r"^claim on PostgreSQL"):
            await store.claim(worker_id="w", limit=1, lease_seconds=1, routes=ROUTES)
        await store.apply_schema()
        await store.apply_schema()  # idempotent
        assert await store.get_workflow("x") is None


async def backend_pids(db: asyncpg.Connection, application_name: str) -> set[int]:
    rows = await db.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = $1",
        application_name,
    )
    return {row["pid"] for row in rows}


@pytest.mark.parametrize("size", [1, 3])
async def test_pool_recovers_after_backends_are_terminated(
    store: PostgresStore, postgres_url: str, db: asyncpg.Connection, size: int
) -> None:
    name = f"durable-recovery-{size}"
    settings = {"application_name": name}
    async with PostgresStore(
        postgres_url, min_size=size, max_size=size, server_settings=settings
    ) as pooled:
        await pooled.enqueue(new(1))
        (row,) = await pooled.list_workflows()
        killed = await backend_pids(db, name)
        assert len(killed) == size
        terminated = await db.fetchval(
            "SELECT count(*) FROM unnest($1::int[]) AS p(pid) WHERE pg_terminate_backend(pid)",
            list(killed),
        )
        assert terminated == size

        # Straight away: a call on a dead connection is StoreUnavailableError (never a
        # raw asyncpg error), and the pool replaces each dead connection as it goes.
        for _ in range(size):
            try:
                assert (await pooled.get_workflow(row.id)) is not None
            except StoreUnavailableError as exc:
                assert isinstance(
                    exc.__cause__,
                    asyncpg.PostgresConnectionError | asyncpg.InternalClientError | OSError,
                )
        for _ in range(3):
            assert (await pooled.get_workflow(row.id)) is not None
        assert not (await backend_pids(db, name)) & killed
        claimed = await claim_one(pooled)
        await pooled.settle(Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="1"))


# -- the EXPLAIN plan of the claim -----------------------------------------------


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


async def test_claim_plan_is_index_driven_and_sorts_only_its_candidates(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    for name in ("bulk", "unserved"):
        await db.execute(
            "INSERT INTO workflows (id, name, status, input, max_attempts, run_at, created_at, "
            f"updated_at) SELECT gen_random_uuid()::text, '{name}', 'pending', '[]', 3, "
            "now() - g * interval '1 ms', now(), now() FROM generate_series(1, 50000) g"
        )
    # As many workflows waiting on deadlines still to come: their scan stays index-driven.
    await db.execute(
        "INSERT INTO workflows (id, name, status, input, max_attempts, run_at, created_at, "
        "updated_at, waiting_for) SELECT gen_random_uuid()::text, 'bulk', 'waiting', '[]', 3, "
        "now() + g * interval '1 s', now(), now(), 'sleep' FROM generate_series(1, 50000) g"
    )
    await db.execute("ANALYZE workflows")
    statements = PostgresStatements()
    routes = [Route(Queue("default", concurrency=100), ("bulk", "idle"), 8)]
    transaction = db.transaction()
    await transaction.start()
    try:
        claim = compile_statement(statements.claim)
        params = {"worker": "w", "limit": 8, "lease_seconds": 30.0}
        args = claim.args({**params, **statements.claim_params(routes)})
        raw = await db.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {claim.sql}", *args)
    finally:
        await transaction.rollback()
    nodes = plan_nodes(json.loads(raw)[0]["Plan"])
    types = [node["Node Type"] for node in nodes]
    # Sorts order the candidates only: the expired scan's and each lane's due and woken
    # scans, at most limit rows each (two lanes here).
    assert all(node["Actual Rows"] <= 5 * 8 for node in nodes if node["Node Type"] == "Sort")
    assert "Seq Scan" not in types
    indexes = {node.get("Index Name") for node in nodes if node["Node Type"] == "Index Scan"}
    assert {"ix_workflows_route", "ix_workflows_status_locked_until"} <= indexes
    scanned = max(
        node["Actual Rows"] for node in nodes if node.get("Index Name") == "ix_workflows_route"
    )
    assert scanned <= 8
    assert await db.fetchval("SELECT count(*) FROM workflows WHERE status = 'running'") == 0


# -- the shared engine on this store ------------------------------------------------


@workflow_step
async def pg_fetch_user(user_id: int) -> str:
    return f"user:{user_id}"


@workflow_step
async def pg_greet(user: str) -> str:
    return f"hello {user}"


@workflow
async def pg_welcome(user_id: int) -> str:
    user = await pg_fetch_user(user_id)
    return await pg_greet(user)


async def test_engine_runs_a_workflow_on_postgres(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    handle = await DurableClient(store).start_workflow(pg_welcome, 7)
    status = await WorkflowRunner(store).run_until_complete(handle)
    assert status is WorkflowStatus.SUCCEEDED
    assert await handle.output(str) == "hello user:7"
    steps = await db.fetch(
        "SELECT step_index, step_name, status, output FROM workflow_steps "
        "WHERE workflow_id = $1 ORDER BY step_index",
        handle.id,
    )
    assert [(s["step_index"], s["status"]) for s in steps] == [(0, "succeeded"), (1, "succeeded")]
    assert steps[0]["step_name"].endswith("pg_fetch_user")
    assert steps[1]["step_name"].endswith("pg_greet")
    assert [json.loads(s["output"]) for s in steps] == ["user:7", "hello user:7"]


async def test_a_statement_takes_its_parameters_by_name(store: PostgresStore) -> None:
    """Every parameter given, one left to its statement's own value, one missing: the
    missing one is named, the defaulted one is sent as the statement gave it."""
    both = sa.select(
        (sa.bindparam("a", type_=sa.Integer()) + sa.bindparam("b", type_=sa.Integer())).label("n")
    )
    defaulted = sa.select(
        (sa.bindparam("a", type_=sa.Integer()) + sa.bindparam("b", 40, type_=sa.Integer())).label(
            "n"
        )
    )
    [row] = await store.connector.fetch(both, {"a": 2, "b": 3})
    assert row["n"] == 5
    [row] = await store.connector.fetch(defaulted, {"a": 2})
    assert row["n"] == 42
    with pytest.raises(TypeError, match="no value for parameter 'b'"):
        await store.connector.fetch(both, {"a": 2})
