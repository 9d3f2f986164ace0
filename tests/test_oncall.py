"""The on-call questions, answered by every SQL store (SQLite, PostgreSQL, MariaDB): failures
counted by error type and name, the list filtered by error type, bulk retry and cancel by
filter, activity over a window, steps by page, the worker registry and what nobody serves,
and a schedule triggered now. A real worker registers, beats and leaves on PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from durable_core import (
    DurableClient,
    Schedule,
    Workflow,
    WorkflowConfig,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.definitions.registry import Registry
from durable_core.definitions.schedules import SCHEDULE_HEADER
from durable_core.errors import WaitTimeoutError
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.operators import WorkerRecord, WorkflowFilter
from durable_core.seams.store import OperatorQueries, Store, WorkerRegistry
from durable_core.sql import schema
from durable_core.testing import WorkflowRunner
from durable_mysql import MySQLStore
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.conftest import (
    MYSQL_URL,
    POSTGRES_URL,
    drop_postgres_database,
    empty_mysql_database,
    fresh_postgres_database,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


class CardDeclined(Exception):
    pass


@workflow_step
async def charge(order: str) -> str:
    if order.startswith("declined"):
        raise CardDeclined(f"card declined for {order}")
    if order.startswith("down"):
        raise ConnectionError(f"card API down for {order}")
    return f"charged {order}"


@workflow(max_attempts=1)
async def pay(order: str) -> str:
    return await charge(order)


@workflow(max_attempts=1)
async def refund(order: str) -> str:
    return await charge(order)


@workflow_step
async def tick(n: int) -> int:
    return n


@workflow
async def many_steps(n: int) -> int:
    for i in range(n):
        await tick(i)
    return n


@pytest.fixture(scope="module")
async def databases(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Store]]:
    """A fresh database with the schema applied on each SQL backend, for this module."""
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    mysql_base = MYSQL_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await fresh_postgres_database(POSTGRES_URL, f"{base}_oncall")
    stores: dict[str, Store] = {
        "sqlite": SQLiteStore(f"sqlite:///{tmp_path_factory.mktemp('oncall') / 'oncall.db'}"),
        "postgresql": PostgresStore(url),
        "mysql": MySQLStore(await empty_mysql_database(f"{mysql_base}_oncall")),
    }
    for made in stores.values():
        await made.open()
        await made.apply_schema()
    try:
        yield stores
    finally:
        for made in stores.values():
            await made.close()
        await drop_postgres_database(url)


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
async def store(request: pytest.FixtureRequest, databases: dict[str, Store]) -> Store:
    """The backend's database of this module, emptied."""
    made = databases[request.param]
    engine = made.engine if isinstance(made, SQLiteStore | MySQLStore) else None
    if engine is not None:
        async with engine.begin() as conn:
            for table in reversed(schema.metadata.sorted_tables):
                await conn.execute(table.delete())
    else:
        assert isinstance(made, PostgresStore)
        await made.connector.execute(sa.text(f"TRUNCATE {schema.WORKFLOW_TABLES}"))
    return made


async def _run(store: Store, fn: Workflow[[str], Any], *orders: str) -> list[str]:
    client, runner = DurableClient(store), WorkflowRunner(store)
    ids = []
    for order in orders:
        handle = await client.start_workflow(fn, order)
        await runner.run_until_complete(handle)
        ids.append(handle.id)
    return ids


async def test_failures_grouped_filtered_and_retried_or_cancelled_in_bulk(store: Store) -> None:
    assert isinstance(store, OperatorQueries)
    client = DurableClient(store)
    declined = await _run(store, pay, "declined-1", "declined-2", "declined-3")
    down = await _run(store, pay, "down-1")
    refunds = await _run(store, refund, "declined-4", "ok-1")
    pending = [(await client.start_workflow(pay, f"later-{n}")).id for n in range(3)]
    card = f"{__name__}.CardDeclined"

    counts = await client.error_counts(WorkflowFilter(status=WorkflowStatus.FAILED))
    assert [(c.name, c.error_type, c.count) for c in counts] == [
        (pay.name, card, 3),
        (pay.name, "builtins.ConnectionError", 1),
        (refund.name, card, 1),
    ]
    assert all(c.latest.tzinfo is not None for c in counts)

    listed = await client.list_workflows(error_type=card)
    assert sorted(r.id for r in listed) == sorted([*declined, refunds[0]])
    listed = await client.list_workflows(error_type=card, name=pay.name, limit=2)
    assert [r.id for r in listed] == declined[::-1][:2]
    assert await client.list_workflows(error_type="builtins.KeyError") == []

    only_pay = WorkflowFilter(name=pay.name, error_type=card)
    assert await client.count_workflows(only_pay) == 3
    assert await client.count_workflows(WorkflowFilter(name=pay.name)) == 7
    assert (
        await client.count_workflows(
            WorkflowFilter(), statuses=[WorkflowStatus.PENDING, WorkflowStatus.SUCCEEDED]
        )
        == 4
    )

    # Bulk retry: the three declined payments, nothing else; each with a fresh budget.
    assert await client.retry_workflows(only_pay) == 3
    for workflow_id in declined:
        record = await client.get(workflow_id)
        assert (record.status, record.attempts) == (WorkflowStatus.PENDING, 0)
    assert (await client.get(down[0])).status is WorkflowStatus.FAILED
    assert (await client.get(refunds[0])).status is WorkflowStatus.FAILED
    assert await client.retry_workflows(only_pay) == 0, "pending ones are not retried"

    # Bulk cancel by filter: every unfinished payment (the retried and the later ones).
    unfinished = WorkflowFilter(name=pay.name)
    assert await client.cancel_workflows(unfinished) == 6
    for workflow_id in [*declined, *pending]:
        assert (await client.get(workflow_id)).status is WorkflowStatus.CANCELLED
    assert (await client.get(refunds[1])).status is WorkflowStatus.SUCCEEDED
    cancelled = await client.error_counts(WorkflowFilter(status=WorkflowStatus.CANCELLED))
    assert [(c.error_type, c.count) for c in cancelled] == [
        ("durable_core.errors.WorkflowCancelledError", 6)
    ]


async def test_activity_over_a_window_and_steps_by_page(store: Store) -> None:
    client = DurableClient(store)
    await _run(store, pay, "ok-1", "ok-2", "declined-1")
    billing = client.with_options(queue="billing")
    await billing.start_workflow(pay, "waiting-for-a-worker")
    [long] = await _run(store, many_steps, 120)  # type: ignore[arg-type]

    by_queue = {a.queue: a for a in await client.activity(timedelta(hours=1))}
    assert set(by_queue) == {"default", "billing"}
    default, billing_now = by_queue["default"], by_queue["billing"]
    assert (default.created, default.started) == (4, 4)
    assert default.ended == {"succeeded": 3, "failed": 1}
    assert default.failure_rate == 0.25
    assert default.start_latency_avg is not None and default.start_latency_max is not None
    assert 0 <= default.start_latency_avg <= default.start_latency_max
    assert (billing_now.created, billing_now.started, billing_now.finished) == (1, 0, 0)
    assert billing_now.start_latency_avg is None and billing_now.failure_rate is None
    assert [a.queue for a in await client.activity(1e-6)] == [], "nothing in the last µs"

    first = await client.steps_page(long, first=0, limit=50)
    assert [s.step_index for s in first] == list(range(50))
    last = await client.steps_page(long, first=100, limit=50)
    assert [s.step_index for s in last] == list(range(100, 120))
    assert last[0].started_at is not None and last[0].output == "100"


def _worker(worker_id: str, *, queues: tuple[str, ...], names: tuple[str, ...]) -> WorkerRecord:
    now = datetime.now(UTC)
    return WorkerRecord(worker_id, "host-a", 4242, 8, queues, names, 3, now, now, now)


async def test_workers_are_live_until_their_rows_expire(store: Store) -> None:
    assert isinstance(store, WorkerRegistry)
    client = DurableClient(store)
    await store.beat_worker(_worker("w-1", queues=("default",), names=(pay.name,)), 3600)
    await store.beat_worker(_worker("w-2", queues=("billing",), names=(refund.name,)), 0.2)
    [one, _] = await client.workers()
    assert (one.worker_id, one.host, one.pid, one.concurrency, one.in_flight) == (
        "w-1",
        "host-a",
        4242,
        8,
        3,
    )
    assert (one.queues, one.names, one.live) == (("default",), (pay.name,), True)
    assert one.expires_at - one.heartbeat_at >= timedelta(seconds=3599)

    # Nobody beats for w-2: it is gone once its row expires, by the clock alone.
    while len(await client.workers()) == 2:  # noqa: ASYNC110 - a row expires by the clock
        await anyio.sleep(0.05)
    [gone] = [w for w in await client.workers(gone_within=3600) if not w.live]
    assert gone.worker_id == "w-2"

    # Pending work nobody serves: a refund in billing (w-2 is gone), a payment elsewhere.
    await client.start_workflow(pay, "ok-1")
    await client.start_workflow(refund, "ok-2")
    await client.with_options(queue="night").start_workflow(pay, "ok-3")
    missing = {(m.queue, m.name, m.pending) for m in await client.unserved()}
    assert missing == {("default", refund.name, 1), ("night", pay.name, 1)}
    night = await client.list_workflows(queue="night")
    assert await client.why_pending(night[0]) == f"no live worker serves {pay.name} (queue night)"
    served = await client.list_workflows(name=pay.name, queue="default")
    assert await client.why_pending(served[0]) is None

    # A clean stop: gone at once; a beat long expired is forgotten by the next one.
    await store.leave_worker("w-1")
    assert await client.workers() == []
    await store.beat_worker(_worker("w-old", queues=("default",), names=()), -2 * 86400)
    assert "w-old" in {w.worker_id for w in await client.workers(gone_within=3 * 86400)}
    await store.beat_worker(_worker("w-3", queues=("default",), names=()), 60)
    assert "w-old" not in {w.worker_id for w in await client.workers(gone_within=3 * 86400)}


async def test_a_schedule_is_triggered_now(store: Store) -> None:
    client = DurableClient(store)
    await client.add_schedule("hourly-pay", pay, Schedule("0 * * * *", args=["ok-sched"]))
    await client.pause_schedule("hourly-pay")
    before = await client.get_schedule("hourly-pay")
    handle = await client.trigger_schedule("hourly-pay")
    assert handle is not None
    record = await client.get(handle.id)
    assert (record.name, record.status, record.queue) == (
        pay.name,
        WorkflowStatus.PENDING,
        "default",
    )
    assert record.input == before.input and record.max_attempts == 1  # pay's own budget
    assert record.headers is not None and record.headers[SCHEDULE_HEADER] == "hourly-pay"
    after = await client.get_schedule("hourly-pay")
    assert (after.paused, after.next_tick, after.last_tick) == (True, before.next_tick, None)
    assert await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED

    # A workflow this process does not know starts in the queue a live worker serves it from.
    assert await store.add_schedule(replace(before, name="elsewhere", workflow_name="x.nightly"))
    assert isinstance(store, WorkerRegistry)
    await store.beat_worker(_worker("w-night", queues=("night",), names=("x.nightly",)), 60)
    elsewhere = await client.trigger_schedule("elsewhere")
    assert elsewhere is not None
    other = await client.get(elsewhere.id)
    assert (other.name, other.queue) == ("x.nightly", "night")


async def test_a_real_worker_registers_and_stats_name_what_nobody_serves(
    postgres_url: str,
) -> None:
    """A worker beats while it runs and leaves when it stops; ``durable stats`` and a wait
    that times out say which pending work no live worker serves."""
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await fresh_postgres_database(POSTGRES_URL, f"{base}_oncall_worker")
    store = PostgresStore(url)
    await store.open()
    try:
        await store.apply_schema()
        client = DurableClient(store)
        registry = Registry()
        registry.add(pay)
        worker = WorkflowWorker(
            store, WorkflowConfig(concurrency=3, lock_timeout_secs=2), registry=registry
        )
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(worker.run)
            while not await client.workers():  # noqa: ASYNC110 - read from the database
                await anyio.sleep(0.05)
            [seen] = await client.workers()
            assert (seen.worker_id, seen.concurrency, seen.queues, seen.names) == (
                worker.worker_id,
                3,
                ("default",),
                (pay.name,),
            )
            beat = seen.heartbeat_at
            while (await client.workers())[0].heartbeat_at == beat:  # noqa: ASYNC110
                await anyio.sleep(0.05)

            done = await client.start_workflow(pay, "ok-9")
            assert await done.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
            stuck = await client.start_workflow(refund, "ok-10")
            with pytest.raises(WaitTimeoutError) as waited:
                await stuck.wait_with_timeout(0.3)
            assert f"last seen pending: no live worker serves {refund.name} (queue default)" in (
                str(waited.value)
            )
            stats = subprocess.run(
                [sys.executable, "-m", "durable_core", "stats", "--database-url", url],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            assert stats.returncode == 0, stats.stderr
            assert f"no live worker serves {refund.name} (queue default): 1 pending" in (
                stats.stdout
            )
            assert f"no live worker serves {pay.name}" not in stats.stdout
            worker.stop()
        assert await client.workers() == [], "a stopped worker is gone at once"
        [left] = await client.workers(gone_within=3600)
        assert left.worker_id == worker.worker_id and not left.live
    finally:
        await store.close()
        await drop_postgres_database(url)
