"""Transaction steps (issue 36): a step whose database writes and whose record commit together.

In-process through the real executor (``WorkflowRunner``), on SQLite and PostgreSQL, with
the application's table in the store's own database (the record is the step's row) and
in another database (``AppDatabase``: the record is a row of ``durable_step_outputs``
there, and the store's row follows). A worker SIGKILLed around the commit is
tests/worker/test_transaction_processes.py; the group commit's part is
tests/worker/test_transaction_group_commit.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from durable_core import (
    AppDatabase,
    DurableClient,
    RegistrationError,
    RetryPolicy,
    TransactionStepError,
    WorkflowContext,
    WorkflowStatus,
    recv,
    sleep,
    start_workflow,
    transaction_step,
    workflow,
    workflow_step,
)
from durable_core.seams.store import Store
from durable_core.sql.app_database import OUTPUTS_TABLE, close_app_databases
from durable_core.testing import WorkflowRunner
from durable_mysql import MySQLStore
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.conftest import (
    drop_postgres_database,
    empty_mysql_database,
    fresh_postgres_database,
    migrated_postgres_database,
)
from tests.test_cli import durable, one_line_error

pytestmark = pytest.mark.anyio

ORDERS_DDL = "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, workflow_id VARCHAR(64))"
COUNTER_DDL = "CREATE TABLE counters (name VARCHAR(64) PRIMARY KEY, value INTEGER NOT NULL)"

RAN: list[str] = []
"""Each run of a transaction step's body, by workflow id (reset for each test)."""
FAIL_ONCE: set[str] = set()
"""Workflow ids whose ``after`` step fails on its first try (reset for each test)."""


class Where:
    """The database the tests' transaction steps write to: the store's own (``None``) or an
    ``AppDatabase``; each test points it (the steps read it at each call)."""

    database: AppDatabase | None = None


def on_where(fn: Any, **options: Any) -> Any:
    """``fn`` as a transaction step on :class:`Where`'s database, declared per call so each
    test's database is its own (the step's name is the same each time)."""

    async def call(*args: Any) -> Any:
        step = transaction_step(
            database=Where.database, name=f"tests.{fn.__name__.lstrip('_')}", **options
        )
        return await step(fn)(*args)

    return call


async def _insert_order(conn: AsyncConnection, order: str) -> int:
    ctx = WorkflowContext.current()
    assert ctx is not None
    RAN.append(ctx.workflow_id)
    await conn.execute(
        sa.text("INSERT INTO orders (id, workflow_id) VALUES (:id, :wf)"),
        {"id": order, "wf": ctx.workflow_id},
    )
    found = await conn.execute(sa.text("SELECT count(*) FROM orders"))
    return int(found.scalar_one())


insert_order = on_where(_insert_order)


@workflow_step
async def after(count: int) -> int:
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.workflow_id in FAIL_ONCE:
        FAIL_ONCE.discard(ctx.workflow_id)
        raise RuntimeError("the step after the transaction fails once")
    return count * 10


@workflow
async def place_order(order: str) -> Any:
    return await after(await insert_order(order))


@workflow(max_attempts=1)
async def place_order_once(order: str) -> Any:
    return await after(await insert_order(order))


@pytest.fixture(autouse=True)
def fresh() -> None:
    RAN.clear()
    FAIL_ONCE.clear()
    Where.database = None


@asynccontextmanager
async def tables(
    where: str, store: Store, tmp_path: Path, postgres_url: str, *ddl: str
) -> AsyncIterator[None]:
    """The application's tables (``ddl``) in the store's own database (``where`` is
    ``"store"``), or in another database of the same kind (``"app"``: an ``AppDatabase``,
    which :class:`Where` then names)."""
    if where == "store":
        await _ddl_on_store(store, *ddl)
        yield
        return
    dropped = None
    if isinstance(store, SQLiteStore):
        url = f"sqlite:///{tmp_path / 'app.db'}"
    elif isinstance(store, MySQLStore):
        url = await empty_mysql_database("txs_app_inprocess")
        await _mysql_drop(url, "orders", "counters")
    else:
        url = dropped = await fresh_postgres_database(postgres_url, "txs_app_inprocess")
    Where.database = AppDatabase(url)
    try:
        await _ddl_on_store_or_app(store, *ddl)
        yield
    finally:
        await close_app_databases()
        Where.database = None
        if dropped is not None:
            await drop_postgres_database(dropped)


async def _mysql_drop(url: str, *tables: str) -> None:
    async with MySQLStore(url) as store, store.engine.begin() as conn:
        await conn.execute(sa.text(f"DROP TABLE IF EXISTS {', '.join(tables)}"))


@pytest.fixture(params=["store", "app"])
async def where(
    request: pytest.FixtureRequest, sql_store: Store, tmp_path: Path, postgres_url: str
) -> AsyncIterator[str]:
    """``orders`` in the store's own database, or in another database of the same kind."""
    async with tables(request.param, sql_store, tmp_path, postgres_url, ORDERS_DDL):
        yield request.param


@pytest.fixture
async def mysql_store(mysql_url: str) -> AsyncIterator[MySQLStore]:
    """A MariaDB store on a database of its own, migrated, with no application tables."""
    url = await empty_mysql_database("txs_mysql")
    await _mysql_drop(url, "orders", "counters")
    async with MySQLStore(url) as store:
        await store.apply_schema()
        yield store


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store on a database of its own, migrated."""
    url = await migrated_postgres_database(postgres_url, "txs_conflicts")
    try:
        async with PostgresStore(url) as store:
            yield store
    finally:
        await drop_postgres_database(url)


async def _ddl_on_store(store: Store, *statements: str) -> None:
    database = store.step_database()  # type: ignore[attr-defined]
    async with database.transaction(None, "read committed") as transaction:
        for statement in statements:
            await transaction.connection.execute(sa.text(statement))


async def _app_query(store: Store, sql: str, **params: Any) -> list[Any]:
    """The rows ``sql`` reads where the application's tables are."""
    database = Where.database or store.step_database()  # type: ignore[attr-defined]
    async with database.transaction(None, "read committed") as transaction:
        return list((await transaction.connection.execute(sa.text(sql), params)).all())


async def test_the_writes_and_the_record_commit_together_and_a_replay_runs_nothing_again(
    sql_store: Store, where: str
) -> None:
    store = sql_store
    handle = await DurableClient(store).start_workflow(place_order, "order-1")
    FAIL_ONCE.add(handle.id)  # the attempt after the transaction step fails: a replay follows
    runner = WorkflowRunner(store)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 10
    assert [handle.id] == RAN, "the body ran once; the replay returned its record"
    assert await _app_query(store, "SELECT id, workflow_id FROM orders") == [("order-1", handle.id)]
    steps = await store.load_steps(handle.id)
    assert [(s.step_name, s.status.value, s.output) for s in steps] == [
        ("tests.insert_order", "succeeded", "1"),
        ("tests.test_transaction_steps.after", "succeeded", "10"),
    ]
    assert (await handle.info()).attempts == 2
    if where == "app":
        records = await _app_query(store, f"SELECT workflow_id, path, output FROM {OUTPUTS_TABLE}")
        assert records == [(handle.id, "0", "1")]


@workflow
async def place_three(order: str) -> Any:
    counts = await asyncio.gather(*(insert_order(f"{order}-{n}") for n in range(3)))
    return await after(len(counts))  # (what each counted depends on how they interleave)


async def test_concurrent_transaction_steps_each_commit_once_under_the_path_of_their_branch(
    sql_store: Store, where: str
) -> None:
    store = sql_store
    handle = await DurableClient(store).start_workflow(place_three, "many")
    FAIL_ONCE.add(handle.id)  # the replay finds each branch's record at its own path
    assert await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 30
    assert len(RAN) == 3, "each body ran once"
    rows = await _app_query(store, "SELECT id FROM orders ORDER BY id")
    assert rows == [("many-0",), ("many-1",), ("many-2",)]
    steps = await store.load_steps(handle.id)
    paths = sorted(
        s.path or str(s.step_index) for s in steps if s.step_name == "tests.insert_order"
    )
    if where == "app":
        query = f"SELECT path FROM {OUTPUTS_TABLE} WHERE workflow_id = :wf ORDER BY path"
        assert [r[0] for r in await _app_query(store, query, wf=handle.id)] == paths
    assert len(set(paths)) == 3 and all(":" in path for path in paths), paths


@pytest.mark.parametrize("place", ["store", "app"])
async def test_mariadb_runs_transaction_steps_with_the_same_code(
    mysql_store: MySQLStore, place: str, tmp_path: Path, postgres_url: str
) -> None:
    async with tables(place, mysql_store, tmp_path, postgres_url, ORDERS_DDL):
        handle = await DurableClient(mysql_store).start_workflow(place_order, "order-m")
        FAIL_ONCE.add(handle.id)
        status = await WorkflowRunner(mysql_store).run_until_complete(handle)
        assert status is WorkflowStatus.SUCCEEDED
        assert await handle.output() == 10
        assert [handle.id] == RAN
        assert await _app_query(mysql_store, "SELECT id FROM orders") == [("order-m",)]
        [step, _] = await mysql_store.load_steps(handle.id)
        assert (step.step_name, step.status.value, step.output) == (
            "tests.insert_order",
            "succeeded",
            "1",
        )
        if place == "app":
            await _lost_row_replays_from_the_record(mysql_store, orders_before=1)


async def test_a_record_in_the_app_database_wins_over_a_store_that_lost_its_row(
    sql_store: Store, tmp_path: Path, postgres_url: str
) -> None:
    """A worker that died after the commit and before the step's row reached the store
    leaves the record alone: the next run finds it and does not run the body again."""
    async with tables("app", sql_store, tmp_path, postgres_url, ORDERS_DDL):
        await _lost_row_replays_from_the_record(sql_store)


async def _lost_row_replays_from_the_record(store: Store, *, orders_before: int = 0) -> None:
    RAN.clear()
    count = orders_before + 1
    handle = await DurableClient(store).start_workflow(place_order_once, "order-7")
    FAIL_ONCE.add(handle.id)
    runner = WorkflowRunner(store)
    assert await runner.run_until_complete(handle) is WorkflowStatus.FAILED
    # The state a crash between the commit and the step row's flush leaves behind.
    await _delete_step_rows(store, handle.id)
    await store.retry_workflow(handle.id)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert [handle.id] == RAN
    assert await handle.output() == count * 10
    [first, _] = await store.load_steps(handle.id)
    assert (first.step_name, first.status.value, first.output) == (
        "tests.insert_order",
        "succeeded",
        str(count),
    )


async def _delete_step_rows(store: Store, workflow_id: str) -> None:
    async with store.step_database().transaction(None, "read committed") as transaction:  # type: ignore[attr-defined]
        await transaction.connection.execute(
            sa.text("DELETE FROM workflow_steps WHERE workflow_id = :wf"), {"wf": workflow_id}
        )


TRIES: list[int] = []


async def _insert_then_fail(conn: AsyncConnection, order: str) -> str:
    TRIES.append(1)
    await conn.execute(sa.text("INSERT INTO orders (id) VALUES (:id)"), {"id": order})
    if len(TRIES) < 3:
        raise ConnectionError("the payment gateway said no")
    return order


insert_then_fail = on_where(
    _insert_then_fail, retry=RetryPolicy(max_attempts=3, initial_interval=0.01)
)


@workflow
async def flaky_order(order: str) -> Any:
    return await insert_then_fail(order)


async def test_a_body_that_raises_rolls_back_and_its_policy_runs_it_again(
    sql_store: Store, where: str
) -> None:
    TRIES.clear()
    store = sql_store
    handle = await DurableClient(store).start_workflow(flaky_order, "order-2")
    assert await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert len(TRIES) == 3
    assert await _app_query(store, "SELECT id FROM orders") == [("order-2",)]
    [step] = await store.load_steps(handle.id)
    assert (step.status.value, step.attempts) == ("succeeded", 3)
    tries = await store.load_step_tries(handle.id)
    assert [json.loads(t.error or "{}")["type"] for t in tries] == ["builtins.ConnectionError"] * 2


class Unserializable:
    pass


async def _insert_and_return_junk(conn: AsyncConnection, order: str) -> Unserializable:
    await conn.execute(sa.text("INSERT INTO orders (id) VALUES (:id)"), {"id": order})
    return Unserializable()


insert_and_return_junk = on_where(_insert_and_return_junk)


@workflow(max_attempts=1)
async def junk_order(order: str) -> Any:
    return await insert_and_return_junk(order)


async def test_an_unserializable_output_rolls_it_all_back_and_records_nothing(
    sql_store: Store, where: str
) -> None:
    store = sql_store
    handle = await DurableClient(store).start_workflow(junk_order, "order-3")
    assert await WorkflowRunner(store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.SerializationError"
    assert "output of step 'tests.insert_and_return_junk'" in error["message"]
    assert await _app_query(store, "SELECT id FROM orders") == []
    [step] = await store.load_steps(handle.id)
    assert (step.status.value, step.output) == ("failed", None)
    if where == "app":
        assert await _app_query(store, f"SELECT * FROM {OUTPUTS_TABLE}") == []


async def test_a_transaction_step_outside_a_workflow_runs_in_a_transaction_of_its_own(
    tmp_path: Path,
) -> None:
    async with AppDatabase(f"sqlite:///{tmp_path / 'app.db'}") as database:
        async with database.transaction(None, "read committed") as transaction:
            await transaction.connection.execute(sa.text(ORDERS_DDL))
        step = transaction_step(database=database)(_insert_then_fail)
        TRIES[:] = [1, 1]  # (its third call returns)
        assert await step("order-5") == "order-5"
        assert await transaction_step(database=database)(_count_orders)() == 1
        async with database.transaction(None, "read committed") as transaction:
            records = await transaction.connection.execute(
                sa.text(f"SELECT count(*) FROM {OUTPUTS_TABLE}")
            )
            assert records.scalar_one() == 0, "outside a workflow nothing is recorded"
    with pytest.raises(TransactionStepError, match="outside a workflow, where there is no store"):
        await transaction_step(_count_orders)()


async def _count_orders(conn: AsyncConnection) -> int:
    return int((await conn.execute(sa.text("SELECT count(*) FROM orders"))).scalar_one())


# -- what a transaction step may not do --------------------------------------------------------


@workflow_step
async def plain(n: int) -> int:
    return n


@workflow
async def child() -> None:
    pass


async def _does(conn: AsyncConnection, what: str) -> None:
    await conn.execute(sa.text("INSERT INTO orders (id) VALUES (:id)"), {"id": what})
    if what == "sleep":
        await sleep(1)
    elif what == "step":
        await plain(1)
    elif what == "recv":
        await recv("topic")
    elif what == "child":
        await start_workflow(child)
    elif what == "transaction":
        await transaction_step(_count_orders)()


does = transaction_step(_does)


@workflow(max_attempts=1)
async def misbehaving(what: str) -> None:
    await does(what)


@pytest.mark.parametrize(
    ("what", "said"),
    [
        ("sleep", "a durable call (sleep, a child start, a message...)"),
        ("step", "step 'tests.test_transaction_steps.plain' called"),
        ("recv", "recv()"),
        ("child", "a durable call (sleep, a child start, a message...)"),
        ("transaction", "transaction step 'tests.test_transaction_steps._count_orders' called"),
    ],
)
async def test_a_durable_call_inside_a_transaction_step_is_refused_and_rolled_back(
    sqlite_store: SQLiteStore, what: str, said: str
) -> None:
    await _ddl_on_store(sqlite_store, ORDERS_DDL)
    handle = await DurableClient(sqlite_store).start_workflow(misbehaving, what)
    assert await WorkflowRunner(sqlite_store).run_until_complete(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.TransactionStepError"
    assert error["message"].startswith(
        f"{said} inside transaction step 'tests.test_transaction_steps._does': a transaction "
        "step only does database work on the connection it is given"
    )
    assert "\n" not in error["message"]
    assert await _app_query(sqlite_store, "SELECT id FROM orders") == [], "rolled back"
    steps = await sqlite_store.load_steps(handle.id)
    assert [(s.step_name, s.status.value) for s in steps] == [
        ("tests.test_transaction_steps._does", "failed")
    ], "nothing but the failed transaction step is recorded"
    assert json.loads(steps[0].error or "{}")["type"] == "durable_core.errors.TransactionStepError"


def test_a_declaration_it_cannot_run_is_refused_when_made() -> None:
    def not_async(conn: AsyncConnection) -> None:
        pass

    with pytest.raises(RegistrationError, match="must be an async def taking the connection"):
        transaction_step(not_async)  # type: ignore[arg-type]
    with pytest.raises(RegistrationError, match="isolation must be one of read committed"):
        transaction_step(isolation="snapshot")  # type: ignore[call-overload]
    with pytest.raises(RegistrationError, match="database must be an AppDatabase"):
        transaction_step(database="postgresql://x/y")  # type: ignore[call-overload]
    with pytest.raises(RegistrationError, match="retry must be a RetryPolicy"):
        transaction_step(retry=3)  # type: ignore[call-overload]


async def test_an_in_memory_sqlite_store_runs_transaction_steps_with_the_runner() -> None:
    async with SQLiteStore("sqlite:///:memory:") as store:
        await store.apply_schema()
        await _ddl_on_store(store, ORDERS_DDL)
        handles = [
            await DurableClient(store).start_workflow(place_order, f"order-{n}") for n in range(3)
        ]
        runner = WorkflowRunner(store)
        async with anyio.create_task_group() as group:
            for handle in handles:
                group.start_soon(runner.run_until_complete, handle)
        assert sorted([await h.output() for h in handles]) == [10, 20, 30]
        assert sorted(RAN) == sorted(h.id for h in handles)


# -- conflicts ---------------------------------------------------------------------------------

BARRIER: dict[str, Any] = {}
"""How many tries read the counter, and the event both first tries meet at."""


async def _increment(conn: AsyncConnection, name: str) -> int:
    value = (
        await conn.execute(sa.text("SELECT value FROM counters WHERE name = :n"), {"n": name})
    ).scalar_one()
    BARRIER["read"] += 1
    if BARRIER["read"] == 2:
        BARRIER["both"].set()
    with anyio.fail_after(120):
        await BARRIER["both"].wait()  # both have read the row before either writes it
    await conn.execute(
        sa.text("UPDATE counters SET value = :v WHERE name = :n"), {"v": value + 1, "n": name}
    )
    return int(value + 1)


increment = on_where(_increment, isolation="repeatable read")


@workflow
async def count_up(name: str) -> Any:
    return await increment(name)


increment_serializable = on_where(_increment, isolation="serializable")


@workflow
async def count_up_serializable(name: str) -> Any:
    return await increment_serializable(name)


@pytest.mark.parametrize("place", ["store", "app"])
async def test_two_transaction_steps_updating_one_row_under_repeatable_read_both_end_right(
    pg_store: PostgresStore, place: str, tmp_path: Path, postgres_url: str
) -> None:
    """Both read the counter at 0 and write 1: under repeatable read the second write is a
    serialization failure, its transaction rolls back, and its step runs again, reading 1.
    (On PostgreSQL: SQLite takes its write lock at BEGIN, so two never interleave.)"""
    async with tables(place, pg_store, tmp_path, postgres_url, COUNTER_DDL):
        await _both_end_right(pg_store, count_up, "SerializationError")


@pytest.mark.parametrize("place", ["store", "app"])
async def test_on_mariadb_under_serializable_the_deadlock_loser_runs_again(
    mysql_store: MySQLStore, place: str, tmp_path: Path, postgres_url: str
) -> None:
    """MariaDB's serializable reads take shared locks: both writes wait on the other's, the
    server rolls one back as a deadlock, and its step runs again."""
    async with tables(place, mysql_store, tmp_path, postgres_url, COUNTER_DDL):
        await _both_end_right(mysql_store, count_up_serializable, "Deadlock found")


async def _both_end_right(store: Store, flow: Any, driver_says: str) -> None:
    BARRIER.update(read=0, both=anyio.Event())
    await _ddl_on_store_or_app(store, "INSERT INTO counters VALUES ('hits', 0)")
    client = DurableClient(store)
    first = await client.start_workflow(flow, "hits")
    second = await client.start_workflow(flow, "hits")
    runner = WorkflowRunner(store)
    async with anyio.create_task_group() as group:
        group.start_soon(runner.run_until_complete, first)
        group.start_soon(runner.run_until_complete, second)
    assert sorted([await first.output(), await second.output()]) == [1, 2]
    assert await _app_query(store, "SELECT value FROM counters") == [(2,)]
    tries = {h.id: await store.load_step_tries(h.id) for h in (first, second)}
    [loser] = [workflow_id for workflow_id, failed in tries.items() if failed]
    [conflict] = tries[loser]
    error = json.loads(conflict.error or "{}")
    assert error["type"] == "durable_core.errors.TransactionConflictError"
    assert "rolled back by a conflict with another transaction" in error["message"]
    assert driver_says in error["message"]
    [step] = await store.load_steps(loser)
    assert (step.status.value, step.attempts) == ("succeeded", 2)
    assert BARRIER["read"] == 3, "the loser read the row again, and only it"


async def _ddl_on_store_or_app(store: Store, *statements: str) -> None:
    if Where.database is None:
        await _ddl_on_store(store, *statements)
        return
    async with Where.database.transaction(None, "read committed") as transaction:
        for statement in statements:
            await transaction.connection.execute(sa.text(statement))


# -- an application database that cannot serve ------------------------------------------------


@workflow(max_attempts=1)
async def order_elsewhere(order: str) -> Any:
    return await insert_order(order)


async def test_an_unreachable_application_database_fails_the_step_in_one_line(
    sqlite_store: SQLiteStore,
) -> None:
    Where.database = AppDatabase("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        handle = await DurableClient(sqlite_store).start_workflow(order_elsewhere, "order-8")
        status = await WorkflowRunner(sqlite_store).run_until_complete(handle)
        assert status is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None
        assert error["type"] == "durable_core.errors.AppDatabaseUnavailableError"
        assert error["message"].startswith(
            "application database postgresql://postgres@127.0.0.1:1/nowhere is unreachable: "
        )
        assert "\n" not in error["message"]
    finally:
        await close_app_databases()


async def test_an_application_database_where_our_table_cannot_be_made_says_so_in_one_line(
    sqlite_store: SQLiteStore, postgres_url: str
) -> None:
    """A user allowed to write the application's tables but not to create one (PostgreSQL 15
    grants no CREATE on ``public``) gets the step's error, naming what to run."""
    url = await fresh_postgres_database(postgres_url, "txs_app_unmigrated")
    admin = await _asyncpg(url)
    try:
        await admin.execute("DROP ROLE IF EXISTS txs_writer")
        await admin.execute("CREATE ROLE txs_writer LOGIN")
        await admin.execute(ORDERS_DDL)
        await admin.execute("GRANT SELECT, INSERT ON orders TO txs_writer")
        Where.database = AppDatabase(url.replace("postgres@", "txs_writer@"))
        handle = await DurableClient(sqlite_store).start_workflow(order_elsewhere, "order-9")
        status = await WorkflowRunner(sqlite_store).run_until_complete(handle)
        assert status is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and error["type"] == "durable_core.errors.AppDatabaseError"
        assert error["message"].startswith(
            f"application database {url.replace('postgres@', 'txs_writer@')} has no "
            f"{OUTPUTS_TABLE} table and could not make it (InsufficientPrivilegeError: "
            "permission denied for schema public): run `durable migrate --app-database URL` "
            "as a user allowed to create tables there"
        )
        assert await admin.fetchval("SELECT count(*) FROM orders") == 0
        writer = url.replace("postgres@", "txs_writer@")
        refused = durable("migrate", "--app-database", writer)
        one_line_error(refused, f"application database {writer} has no {OUTPUTS_TABLE} table")
        # What the error says to do: migrate as a user who may, and let the writer write.
        made = durable("migrate", "--app-database", url)
        assert made.returncode == 0, made.stderr
        await admin.execute(f"GRANT SELECT, INSERT ON {OUTPUTS_TABLE} TO txs_writer")
        await sqlite_store.retry_workflow(handle.id)
        status = await WorkflowRunner(sqlite_store).run_until_complete(handle)
        assert status is WorkflowStatus.SUCCEEDED
        assert await admin.fetchval("SELECT count(*) FROM orders") == 1
    finally:
        await close_app_databases()
        await admin.close()
        await drop_postgres_database(url)
        cleanup = await _asyncpg(postgres_url)
        try:
            await cleanup.execute("DROP ROLE IF EXISTS txs_writer")
        finally:
            await cleanup.close()


async def _asyncpg(url: str) -> Any:
    import asyncpg

    return await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))


async def test_migrate_makes_the_record_table_once_and_in_one_line_when_it_cannot(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    for _ in range(2):
        made = durable("migrate", "--app-database", url)
        assert made.returncode == 0, made.stderr
        assert made.stdout.strip() == (
            f"transaction step records ready in application database {url}"
        )
    assert OUTPUTS_TABLE in sa.inspect(sa.create_engine(url)).get_table_names()
    failed = durable("migrate", "--app-database", "postgresql://postgres@127.0.0.1:1/nowhere")
    one_line_error(
        failed, "application database postgresql://postgres@127.0.0.1:1/nowhere is unreachable: "
    )


# -- a body stopped inside its transaction -----------------------------------------------------


async def _insert_and_hang(conn: AsyncConnection, order: str) -> None:
    await conn.execute(sa.text("INSERT INTO orders (id) VALUES (:id)"), {"id": order})
    await anyio.sleep(3600)


insert_and_hang = on_where(_insert_and_hang)


@workflow(timeout=0.2, max_attempts=1)
async def stuck(order: str) -> None:
    await insert_and_hang(order)


@pytest.mark.parametrize("place", ["store", "app"])
async def test_bodies_stopped_inside_their_transactions_roll_back_and_give_their_connections_back(
    pg_store: PostgresStore, place: str, tmp_path: Path, postgres_url: str
) -> None:
    """Twelve workflows time out inside their transaction steps, one after another: each
    transaction rolls back, and its connection goes back to the pool (of ten), so the
    workflow after them runs."""
    async with tables(place, pg_store, tmp_path, postgres_url, ORDERS_DDL):
        client, runner = DurableClient(pg_store), WorkflowRunner(pg_store)
        with anyio.fail_after(300):  # a pool that lost its connections would wait an hour
            for n in range(12):
                handle = await client.start_workflow(stuck, f"stuck-{n}")
                assert await runner.run_until_complete(handle) is WorkflowStatus.CANCELLED
                error = await handle.error()
                assert error is not None
                assert error["type"] == "durable_core.errors.WorkflowTimeoutError"
            assert await _app_query(pg_store, "SELECT id FROM orders") == []
            handle = await client.start_workflow(place_order, "after-the-stuck")
            assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        assert await _app_query(pg_store, "SELECT id FROM orders") == [("after-the-stuck",)]
