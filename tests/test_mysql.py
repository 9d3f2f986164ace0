"""MariaDB / MySQL specifics of ``MySQLStore``, against the real server.

The store contract suite (tests/contract/test_contract_mysql.py) covers every
operation; these tests cover what only MySQL has: URL forms, database
creation, column types, collation, strict mode, rowcount semantics, packet
limits and how driver failures are translated.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from durable_core import store_from_url
from durable_core.contract.support import new_workflow, unique_name
from durable_core.errors import (
    FrameworkError,
    InvalidDatabaseURLError,
    LeaseLostError,
    SchemaMissingError,
    StoreError,
    StoreUnavailableError,
    ValueTooLargeError,
)
from durable_core.seams.records import Settlement, StepStatus, WorkflowStatus
from durable_core.sql import schema
from durable_mysql import MySQLStore, ensure_database
from tests.conftest import MYSQL_URL, scratch_name

pytestmark = pytest.mark.anyio

BASE_URL = MYSQL_URL.rsplit("/", 1)[0]


@pytest.fixture
async def store(mysql_url: str) -> AsyncIterator[MySQLStore]:
    opened = MySQLStore(mysql_url)
    await opened.open()
    yield opened
    await opened.close()


async def scalar(store: MySQLStore, sql: str, **params: object) -> object:
    async with store.engine.connect() as conn:
        return (await conn.execute(sa.text(sql), params)).scalar_one()


# -- URLs and databases -------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root@127.0.0.1:3306/durable_test",
        "mariadb://root@127.0.0.1:3306/durable_test",
        "mysql+aiomysql://root@127.0.0.1:3306/durable_test",
        "mariadb+aiomysql://root@127.0.0.1/durable_test",
    ],
)
def test_store_from_url_resolves_mysql_urls(url: str) -> None:
    store = store_from_url(url)
    assert type(store) is MySQLStore
    assert store.description == "MySQL database durable_test on 127.0.0.1"


def test_the_description_carries_no_password() -> None:
    store = store_from_url("mysql://root:s3cret@127.0.0.1:3306/durable_test")
    assert "s3cret" not in store.description


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("mysql://root@127.0.0.1:3306/", "names no database"),
        ("mysql+asyncmy://root@127.0.0.1/durable_test", "uses aiomysql"),
        ("mysql://root@127.0.0.1:notaport/db", "malformed"),
    ],
)
def test_bad_mysql_urls_are_refused(url: str, reason: str) -> None:
    with pytest.raises(InvalidDatabaseURLError, match=reason):
        MySQLStore(url)


async def test_ensure_database_creates_a_utf8mb4_binary_database(store: MySQLStore) -> None:
    name = "durable_test_created"
    async with store.engine.begin() as conn:
        await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
    try:
        await ensure_database(f"{BASE_URL}/{name}")
        await ensure_database(f"{BASE_URL}/{name}")  # idempotent
        async with store.engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.text(
                        "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME "
                        "FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = :name"
                    ),
                    {"name": name},
                )
            ).one()
        assert tuple(row) == ("utf8mb4", "utf8mb4_bin")
    finally:
        async with store.engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")


# -- translated failures ----------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_closed_port_is_store_unavailable() -> None:
    url = f"mysql://root@127.0.0.1:{_closed_port()}/durable_test"
    store = MySQLStore(url)
    await store.open()
    try:
        with pytest.raises(StoreUnavailableError, match="unavailable") as caught:
            await store.get_workflow("x")
        assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
        with pytest.raises(StoreUnavailableError):
            await store.enqueue([new_workflow()])
    finally:
        await store.close()
    with pytest.raises(StoreUnavailableError):
        await ensure_database(url)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (f"{BASE_URL}/durable_no_such_database", "Unknown database"),
        ("mysql://nobody:wrong@127.0.0.1:3306/durable_test", "Access denied"),
    ],
)
async def test_a_refused_connection_is_not_mistaken_for_an_outage(url: str, said: str) -> None:
    store = MySQLStore(url)
    await store.open()
    try:
        with pytest.raises(StoreError, match="refused the connection") as caught:
            await store.get_workflow("x")
        assert not isinstance(caught.value, StoreUnavailableError)
        assert said in str(caught.value)
    finally:
        await store.close()


async def test_missing_tables_are_schema_missing(mysql_url: str) -> None:
    url = f"{BASE_URL}/{scratch_name('durable_test_noschema')}"
    await ensure_database(url)
    store = MySQLStore(url)
    await store.open()
    try:
        await schema.drop_schema(store.engine)
        for operation in (
            store.get_workflow("x"),
            store.list_workflows(),
            store.load_steps("x"),
            store.enqueue([new_workflow()]),
            store.acquire("x", worker_id="w", lease_seconds=1),
        ):
            with pytest.raises(SchemaMissingError, match="durable migrate") as caught:
                await operation
            assert caught.value.retryable is False
        await store.apply_schema()
        assert await store.get_workflow("x") is None
    finally:
        await store.close()


# -- column types, collation, precision -------------------------------------------


async def test_columns_are_longtext_datetime6_and_binary_utf8mb4(store: MySQLStore) -> None:
    async with store.engine.connect() as conn:
        columns = {
            (row.TABLE_NAME, row.COLUMN_NAME): (row.DATA_TYPE, row.DATETIME_PRECISION)
            for row in await conn.execute(
                sa.text(
                    "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, DATETIME_PRECISION "
                    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
                )
            )
        }
        collations: dict[str, str] = dict(
            (
                await conn.execute(
                    sa.text(
                        "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = DATABASE()"
                    )
                )
            ).all()
        )
    for table in ("workflows", "workflow_steps"):
        for column in ("input", "output", "error"):
            assert columns[(table, column)][0] == "longtext"
        assert collations[table] == "utf8mb4_bin"
    for column in ("run_at", "locked_until", "created_at", "updated_at", "completed_at"):
        assert columns[("workflows", column)] == ("datetime", 6)
    assert columns[("workflow_steps", "started_at")] == ("datetime", 6)


async def test_times_keep_their_microseconds(store: MySQLStore) -> None:
    row = new_workflow(delay_seconds=0.000123)
    await store.enqueue([row])
    got = await store.get_workflow(row.id)
    assert got is not None
    assert got.run_at - got.created_at == timedelta(microseconds=123)
    assert got.created_at.tzinfo is UTC
    stored = await scalar(store, "SELECT created_at FROM workflows WHERE id = :id", id=row.id)
    assert isinstance(stored, datetime)
    assert stored.replace(tzinfo=UTC) == got.created_at


async def test_names_compare_exactly(store: MySQLStore) -> None:
    base = unique_name("café-😀")
    names = [base, base.replace("é", "e"), base.upper(), base.replace("😀", "😁")]
    rows = [new_workflow(name) for name in names]
    await store.enqueue(rows)
    for row in rows:
        assert [r.id for r in await store.list_workflows(name=row.name)] == [row.id]


async def test_four_byte_characters_survive_in_every_column(store: MySQLStore) -> None:
    text = "\U0001d518\U0001d52b\U0001d526 😀 👩\u200d👩\u200d👧 漢字"
    row = new_workflow(unique_name(text), input=f'"{text}"')
    await store.enqueue([row])
    claimed = await store.acquire(row.id, worker_id=f"worker {text}", lease_seconds=30)
    assert claimed is not None
    await store.start_step(claimed.lease, 0, f"step {text}", f'"{text}"')
    await store.fail_step(claimed.lease, 0, f'"{text}"')
    (step,) = await store.load_steps(row.id)
    assert (step.step_name, step.input, step.error) == (f"step {text}", f'"{text}"', f'"{text}"')
    got = await store.get_workflow(row.id)
    assert got is not None and (got.name, got.locked_by) == (row.name, f"worker {text}")


async def test_an_over_long_name_is_an_error_not_a_truncation(store: MySQLStore) -> None:
    row = new_workflow("n" * 300)
    with pytest.raises(StoreError, match="too long"):
        await store.enqueue([row])
    assert await store.get_workflow(row.id) is None
    mode = await scalar(store, "SELECT @@SESSION.sql_mode")
    assert "STRICT_ALL_TABLES" in str(mode)


# -- rowcount semantics ---------------------------------------------------------------


class FrozenClockStore(MySQLStore):
    """A MySQLStore whose clock stands still, so repeated writes change nothing."""

    moment = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)

    def _now(self) -> datetime:
        return self.moment


async def test_writes_that_change_nothing_still_count_as_held(mysql_url: str) -> None:
    store = FrozenClockStore(mysql_url)
    await store.open()
    try:
        async with store.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            client_flag = raw.driver_connection.client_flag  # type: ignore[union-attr]
        assert client_flag & 2, "CLIENT_FOUND_ROWS must be set"
        row = new_workflow()
        await store.enqueue([row])
        claimed = await store.acquire(row.id, worker_id="w", lease_seconds=30)
        assert claimed is not None
        await store.heartbeat(claimed.lease, 30)
        await store.heartbeat(claimed.lease, 30)  # same values again: matched, not changed
        await store.start_step(claimed.lease, 0, "s", '"in"')
        await store.complete_step(claimed.lease, 0, '"out"')
        await store.complete_step(claimed.lease, 0, '"out"')
        (step,) = await store.load_steps(row.id)
        assert (step.status, step.output) == (StepStatus.SUCCEEDED, '"out"')
        await store.settle(Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="1"))
        with pytest.raises(LeaseLostError):
            await store.heartbeat(claimed.lease, 30)
    finally:
        await store.close()


# -- packet limits --------------------------------------------------------------------


async def test_a_value_beyond_max_allowed_packet_is_refused_cleanly(store: MySQLStore) -> None:
    limit = await store.max_allowed_packet()
    huge = "x" * (limit + 1)
    row = new_workflow(input=huge)
    with pytest.raises(ValueTooLargeError, match="max_allowed_packet") as caught:
        await store.enqueue([row])
    assert caught.value.retryable is False
    assert await store.get_workflow(row.id) is None

    claimed = await store.acquire((await _enqueued(store)), worker_id="w", lease_seconds=30)
    assert claimed is not None
    await store.start_step(claimed.lease, 0, "s", '"in"')
    with pytest.raises(ValueTooLargeError):
        await store.complete_step(claimed.lease, 0, huge)
    escaped = '"' * (limit // 2 + 1)  # fits as text, but doubles once escaped
    with pytest.raises(ValueTooLargeError):
        await store.settle(Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output=escaped))
    (step,) = await store.load_steps(claimed.id)
    assert (step.status, step.output) == (StepStatus.RUNNING, None)
    got = await store.get_workflow(claimed.id)
    assert got is not None and got.status is WorkflowStatus.RUNNING
    await store.heartbeat(claimed.lease, 30)  # the connection pool is still healthy


async def _enqueued(store: MySQLStore) -> str:
    row = new_workflow()
    await store.enqueue([row])
    return row.id


async def test_a_batch_larger_than_one_packet_is_split_by_the_driver(store: MySQLStore) -> None:
    limit = await store.max_allowed_packet()
    value = "v" * (limit // 4)
    name = unique_name("bigbatch")
    rows = [new_workflow(name, input=value) for _ in range(6)]
    await store.enqueue(rows)
    listed = await store.list_workflows(name=name)
    assert len(listed) == 6 and all(r.input == value for r in listed)


async def test_errors_are_framework_errors(store: MySQLStore) -> None:
    row = new_workflow()
    # A workflow id wider than its column is refused by the database itself.
    wide = dataclasses.replace(row, id="x" * 300)
    with pytest.raises(FrameworkError) as caught:
        await store.enqueue([wide])
    assert isinstance(caught.value, StoreError)
    assert isinstance(caught.value.__cause__, sa.exc.DBAPIError)
