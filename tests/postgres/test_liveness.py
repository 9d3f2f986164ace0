"""A worker's liveness tied to its database session (PostgreSQL): a session-level advisory
lock per worker, held on a connection of its own. When the session ends, any other
worker's check ends the leases the dead worker held and the next claim takes its
workflows over, with one more attempt, its late writes fenced. A lock taken before the
server restarted proves nothing, and a worker that holds none is left to its lease.

The store-independent part (a dead worker found once, its workflows taken over, its
writes refused, a live one's leases standing) is ``LivenessContract``'s
(``test_postgres_contract.py``); what a real SIGKILL and SIGSTOP do is
``tests/worker/test_recovery_processes.py``'s.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import anyio
import asyncpg
import pytest

from durable_core.definitions.queues import Queue, Route
from durable_core.durations import utcnow
from durable_core.errors import InvalidDatabaseURLError
from durable_core.seams.operators import WorkerRecord
from durable_core.seams.records import NewWorkflow
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from durable_postgres.dialect import LIVENESS_LOCKS
from tests.worker.conftest import eventually

pytestmark = pytest.mark.anyio

ROUTES = [Route(Queue("default"), ("tests.flow",), 1000)]
LONG_LEASE = 300.0
"""Longer than any test lasts: a lease that ends here was ended, not run out."""
SAFETY = 120.0
"""How long before a test is called hung: never a measure of speed."""


def plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


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
    """Another worker's store: its own pool on the same (already emptied) database."""
    async with PostgresStore(postgres_url) as second:
        yield second


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(plain(postgres_url))
    try:
        yield conn
    finally:
        await conn.close()


def worker(worker_id: str) -> WorkerRecord:
    now = utcnow()
    return WorkerRecord(worker_id, "host", 1, 4, ("default",), ("tests.flow",), 1, now, now, now)


async def start_one(store: PostgresStore) -> str:
    row = NewWorkflow(
        id=str(uuid.uuid4()), name="tests.flow", input=json.dumps([1]), max_attempts=3
    )
    [workflow_id] = await store.enqueue([row])
    return workflow_id


class Held:
    """A worker's liveness session held in a task of ``group`` until :meth:`end`."""

    def __init__(self, store: PostgresStore, worker_id: str) -> None:
        self.store, self.worker_id = store, worker_id
        self.scope = anyio.CancelScope()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with self.scope:
            await self.store.hold_liveness(self.worker_id, task_status=task_status)

    def end(self) -> None:
        self.scope.cancel()


async def session_of(db: asyncpg.Connection, key: int) -> int | None:
    """The backend pid of the session holding the liveness lock ``key``."""
    pid: int | None = await db.fetchval(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid "
        "AND objid = $2::oid AND objsubid = 2 AND granted",
        LIVENESS_LOCKS,
        key,
    )
    return pid


async def freed(db: asyncpg.Connection, key: int | None) -> None:
    """Wait until no session holds the liveness lock ``key`` (a closed session ends on the
    server just after its close)."""
    assert key is not None

    async def free() -> bool:
        return await session_of(db, key) is None

    await eventually(free, timeout=SAFETY, what=f"the liveness lock {key} to be free")


async def test_a_worker_that_stopped_cleanly_is_buried_with_no_lease_to_end(
    store: PostgresStore, other: PostgresStore, db: asyncpg.Connection
) -> None:
    async with anyio.create_task_group() as group:
        held = Held(store, "w1")
        await group.start(held.run)
        key, _ = store.worker_session("w1")
        await store.beat_worker(worker("w1"), LONG_LEASE)
        held.end()
    await store.leave_worker("w1")
    await freed(db, key)
    assert await other.end_dead_leases() == {"w1": 0}
    assert await other.end_dead_leases() == {}


async def test_a_lock_taken_before_the_server_restarted_proves_nothing(
    store: PostgresStore, other: PostgresStore, db: asyncpg.Connection
) -> None:
    await start_one(store)
    async with anyio.create_task_group() as group:
        held = Held(store, "w1")
        await group.start(held.run)
        key, _ = store.worker_session("w1")
        await store.beat_worker(worker("w1"), LONG_LEASE)
        await store.claim(worker_id="w1", limit=1, lease_seconds=LONG_LEASE, routes=ROUTES)
        held.end()
    await freed(db, key)
    # As if the server had restarted since w1 took its lock (every session ended then).
    await db.execute("UPDATE workflow_workers SET session_epoch = session_epoch - interval '1 h'")
    assert await other.end_dead_leases() == {}
    assert await other.claim(worker_id="w2", limit=1, lease_seconds=30, routes=ROUTES) == []
    running = await db.fetchval("SELECT locked_until > now() + interval '60 s' FROM workflows")
    assert running, "left to its lease"
    # On the server it was taken on, the same free lock is a dead worker.
    await db.execute("UPDATE workflow_workers SET session_epoch = session_epoch + interval '1 h'")
    assert await other.end_dead_leases() == {"w1": 1}


async def test_a_worker_that_holds_no_session_is_left_to_its_lease(
    store: PostgresStore, other: PostgresStore, db: asyncpg.Connection
) -> None:
    await start_one(store)
    await store.beat_worker(worker("w1"), LONG_LEASE)  # no liveness session held
    assert await db.fetchval("SELECT session_key FROM workflow_workers") is None
    await store.claim(worker_id="w1", limit=1, lease_seconds=LONG_LEASE, routes=ROUTES)
    assert await other.end_dead_leases() == {}
    assert await other.claim(worker_id="w2", limit=1, lease_seconds=30, routes=ROUTES) == []


async def test_a_lost_session_is_taken_again_with_the_same_key(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    async with anyio.create_task_group() as group:
        held = Held(store, "w1")
        await group.start(held.run)
        key, _ = store.worker_session("w1")
        assert key is not None
        first = await session_of(db, key)
        assert first is not None
        assert await db.fetchval("SELECT pg_terminate_backend($1)", first)

        async def retaken() -> bool:
            return await session_of(db, key) not in (None, first)

        await eventually(retaken, timeout=SAFETY, what="the lock taken again on a new session")
        assert store.worker_session("w1")[0] == key
        held.end()
    assert store.worker_session("w1") == (None, None)


async def test_liveness_can_be_turned_off(postgres_url: str) -> None:
    separator = "&" if "?" in postgres_url else "?"
    off = PostgresStore(f"{postgres_url}{separator}durable_liveness=off")
    assert not off.offers_liveness
    assert not PostgresStore(postgres_url, liveness=False).offers_liveness
    assert PostgresStore(postgres_url).offers_liveness
    with pytest.raises(InvalidDatabaseURLError, match="durable_liveness"):
        PostgresStore(f"{postgres_url}{separator}durable_liveness=maybe")
    async with off:
        with anyio.fail_after(SAFETY):
            await off.hold_liveness("w1")  # returns at once: it holds nothing
        assert off.worker_session("w1") == (None, None)
