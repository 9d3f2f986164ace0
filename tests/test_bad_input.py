"""Bad input gets a clear ``FrameworkError`` subclass, and the database is left as it was."""

from __future__ import annotations

import dataclasses
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import durable_core
from durable_core import (
    ClaimNotSupportedError,
    ConfigurationError,
    CorruptRecordError,
    DurableClient,
    FrameworkError,
    InvalidArgumentsError,
    InvalidDatabaseURLError,
    NotAWorkflowError,
    RegistrationError,
    Registry,
    SchemaMissingError,
    SerializationError,
    StoreError,
    WorkflowConfig,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.caller.backends import url_forms
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.records import NewWorkflow
from durable_core.seams.store import Claimer
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore
from tests.side_effects import effect, effect_count

FAST = WorkflowConfig(retry_backoff_secs=0)

# -- helpers ---------------------------------------------------------------------------------


def query(store: SQLiteStore, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    database = store.engine.url.database
    assert database and Path(database).is_file()
    conn = sqlite3.connect(database, timeout=5, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def snapshot(store: SQLiteStore) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every row of both tables."""
    return (
        query(store, "SELECT * FROM workflows ORDER BY id"),
        query(store, "SELECT * FROM workflow_steps ORDER BY workflow_id, step_index"),
    )


# -- workflows -------------------------------------------------------------------------------


@workflow
async def charge_flow(customer_id: int, amount: float, *, note: str = "") -> str:
    effect("charge.body")
    return f"{customer_id}:{amount}:{note}"


@workflow_step
async def corrupt_first() -> dict[str, int]:
    effect("corrupt.first")
    return {"value": 1}


@workflow_step
async def corrupt_flaky() -> None:
    effect("corrupt.flaky")
    if effect_count("corrupt.flaky") == 1:
        raise RuntimeError("transient")


@workflow
async def corrupt_flow() -> int:
    value = await corrupt_first()
    await corrupt_flaky()
    return value["value"]


def plain_function(x: int) -> int:
    return x


async def plain_coroutine(x: int) -> int:
    return x


class Unserializable:
    pass


def local_dataclass_instance() -> Any:
    @dataclasses.dataclass
    class Local:
        x: int

    return Local(1)


@workflow_step
async def bad_input_step(value: Any) -> None:
    effect("bad_input.step")


@workflow
async def bad_step_input_flow() -> None:
    await bad_input_step(Unserializable())


# -- start_workflow refuses what it cannot store ---------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "bad",
    [
        object(),
        Unserializable(),
        lambda x: x,
        {"key": object()},
        [1, 2, {3, Unserializable()}],
        local_dataclass_instance(),
    ],
    ids=["object", "instance", "lambda", "nested-dict", "nested-set", "local-dataclass"],
)
async def test_unserializable_arguments_are_refused_and_nothing_written(
    sqlite_store: SQLiteStore, bad: Any
) -> None:
    client = DurableClient(sqlite_store)
    with pytest.raises(SerializationError, match=r"arguments of workflow .*charge_flow") as caught:
        await client.start_workflow(charge_flow, 1, 2.0, note=bad)
    assert isinstance(caught.value, FrameworkError) and not caught.value.retryable
    with pytest.raises(SerializationError):
        await client.start_workflow(charge_flow, bad, 2.0)
    assert snapshot(sqlite_store) == ([], [])


async def test_batch_with_one_bad_item_writes_nothing(sqlite_store: SQLiteStore) -> None:
    client = DurableClient(sqlite_store)
    with pytest.raises(SerializationError):
        await client.start_workflows(charge_flow, [(1, 1.0), (2, object()), (3, 3.0)])
    with pytest.raises(InvalidArgumentsError):
        await client.start_workflows(charge_flow, [(1, 1.0), (2,)])
    assert snapshot(sqlite_store) == ([], [])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "kwargs", "detail"),
    [
        ((1,), {}, "amount"),
        ((1, 2.0, 3), {}, "too many positional"),
        ((1, 2.0), {"colour": "red"}, "colour"),
        ((), {"amount": 1.0}, "customer_id"),
    ],
    ids=["missing", "too-many", "unknown-kwarg", "missing-first"],
)
async def test_arguments_that_do_not_fit_the_signature(
    sqlite_store: SQLiteStore, args: tuple[Any, ...], kwargs: dict[str, Any], detail: str
) -> None:
    with pytest.raises(InvalidArgumentsError, match=detail) as caught:
        await DurableClient(sqlite_store).start_workflow(charge_flow, *args, **kwargs)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, FrameworkError)
    assert charge_flow.name in str(caught.value)
    assert snapshot(sqlite_store) == ([], [])


async def test_start_workflow_on_something_that_is_not_a_workflow(
    sqlite_store: SQLiteStore,
) -> None:
    client = DurableClient(sqlite_store)
    for fn in (plain_function, plain_coroutine, corrupt_first):
        with pytest.raises(NotAWorkflowError, match="not a workflow") as caught:
            await client.start_workflow(fn, 1)  # type: ignore[arg-type]
        assert isinstance(caught.value, TypeError) and isinstance(caught.value, RegistrationError)
        assert "@workflow" in str(caught.value)
    assert snapshot(sqlite_store) == ([], [])


def test_bad_declarations_fail_at_decoration() -> None:
    private = Registry()
    with pytest.raises(RegistrationError, match="async def"):
        workflow(registry=private)(plain_function)  # type: ignore[arg-type]
    with pytest.raises(RegistrationError, match="max_attempts"):
        workflow(max_attempts=0, registry=private)(plain_coroutine)
    assert private.names() == []
    with pytest.raises(ConfigurationError, match="max_attempts"):
        DurableClient(object(), max_attempts=0)  # type: ignore[arg-type]


async def test_negative_delay_is_refused(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(ConfigurationError, match="delay"):
        await DurableClient(sqlite_store).start_workflow_later(-1, charge_flow, 1, 1.0)
    assert snapshot(sqlite_store) == ([], [])


# -- rows the engine cannot run --------------------------------------------------------------


async def test_row_naming_an_unregistered_workflow_fails_with_that_message(
    sqlite_store: SQLiteStore,
) -> None:
    workflow_id = str(uuid.uuid4())
    name = "tests.gone_module.removed_workflow"
    await sqlite_store.enqueue(
        [NewWorkflow(id=workflow_id, name=name, input='{"args":[1],"kwargs":{}}', max_attempts=3)]
    )
    runner = WorkflowRunner(sqlite_store, FAST)
    assert await runner.run_once(workflow_id) is WorkflowStatus.FAILED  # not retried
    record = await sqlite_store.get_workflow(workflow_id)
    assert record is not None and record.attempts == 1 and record.locked_by is None
    error = await DurableClient(sqlite_store).handle(workflow_id).error()
    assert error is not None
    assert error["type"] == "durable_core.errors.UnknownWorkflowError"
    assert name in error["message"] and "registered" in error["message"]
    assert await sqlite_store.load_steps(workflow_id) == []


@pytest.mark.anyio
@pytest.mark.parametrize("garbage", ["not json", "[1, 2]", '{"args": 1, "kwargs": {}}', ""])
async def test_corrupted_input_column_fails_with_serialization_error(
    sqlite_store: SQLiteStore, effects: Callable[[str], int], garbage: str
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(charge_flow, 1, 2.0)
    query(sqlite_store, "UPDATE workflows SET input = ? WHERE id = ?", (garbage, handle.id))
    assert await WorkflowRunner(sqlite_store, FAST).run_once(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None
    assert error["type"] == "durable_core.errors.SerializationError"
    assert "input of workflow" in error["message"] and handle.id in error["message"]
    assert (await handle.info()).attempts == 1
    assert effects("charge.body") == 0  # the body never ran on garbage


async def test_corrupted_step_output_column_gives_a_clear_error(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    runner = WorkflowRunner(sqlite_store, FAST)
    handle = await DurableClient(sqlite_store).start_workflow(corrupt_flow)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING
    query(
        sqlite_store,
        "UPDATE workflow_steps SET output = 'not json' WHERE workflow_id = ? AND step_index = 0",
        (handle.id,),
    )
    steps_before = query(sqlite_store, "SELECT * FROM workflow_steps ORDER BY step_index")

    assert await runner.run_once(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None
    assert error["type"] == "durable_core.errors.SerializationError"
    assert "cached output of step" in error["message"] and corrupt_first.name in error["message"]
    assert (error["step_index"], error["step_name"]) == (0, corrupt_first.name)
    # The corrupted cache is neither silently re-run nor overwritten.
    assert effects("corrupt.first") == 1 and effects("corrupt.flaky") == 1
    assert query(sqlite_store, "SELECT * FROM workflow_steps ORDER BY step_index") == steps_before


async def test_corrupted_status_column_is_a_corrupt_record_error(
    sqlite_store: SQLiteStore,
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(charge_flow, 1, 2.0)
    query(sqlite_store, "UPDATE workflows SET status = 'zombie' WHERE id = ?", (handle.id,))
    with pytest.raises(CorruptRecordError, match="zombie") as caught:
        await handle.status()
    assert isinstance(caught.value, SerializationError) and isinstance(caught.value, StoreError)


async def test_output_that_cannot_be_stored_fails_the_workflow(
    sqlite_store: SQLiteStore,
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(unstorable_output_flow)
    assert await WorkflowRunner(sqlite_store, FAST).run_once(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.SerializationError"
    assert "output of workflow" in error["message"]


@workflow
async def unstorable_output_flow() -> Any:
    return Unserializable()


async def test_step_input_that_cannot_be_stored_fails_before_the_step_runs(
    sqlite_store: SQLiteStore, effects: Callable[[str], int]
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(bad_step_input_flow)
    assert await WorkflowRunner(sqlite_store, FAST).run_once(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.SerializationError"
    assert "input of step" in error["message"] and bad_input_step.name in error["message"]
    assert "Unserializable" in error["message"]
    assert await handle.steps() == []
    assert effects("bad_input.step") == 0


# -- stores that cannot claim ----------------------------------------------------------------


async def test_sqlite_is_no_claimer_and_the_worker_says_it_needs_postgres(
    sqlite_store: SQLiteStore,
) -> None:
    assert not isinstance(sqlite_store, Claimer)
    assert not hasattr(sqlite_store, "claim") and not hasattr(sqlite_store, "wait_for_work")
    handle = await DurableClient(sqlite_store).start_workflow(charge_flow, 1, 2.0)
    before = snapshot(sqlite_store)

    worker = WorkflowWorker(sqlite_store, WorkflowConfig())
    with anyio.fail_after(120), pytest.raises(ClaimNotSupportedError, match="PostgreSQL") as caught:
        await worker.run()
    assert sqlite_store.description in str(caught.value)
    assert "WorkflowRunner" in str(caught.value)
    assert not caught.value.retryable
    assert worker.claimed_total == 0 and worker.in_flight == 0
    assert snapshot(sqlite_store) == before
    assert await handle.status() is WorkflowStatus.PENDING


# -- missing tables --------------------------------------------------------------------------


async def test_missing_tables_give_schema_missing_error(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'empty.db'}")
    await store.open()
    try:
        operations = [
            store.get_workflow("x"),
            store.list_workflows(),
            store.load_steps("x"),
            DurableClient(store).start_workflow(charge_flow, 1, 2.0),
        ]
        for operation in operations:
            with pytest.raises(SchemaMissingError, match="apply_schema") as caught:
                await operation
            assert isinstance(caught.value, StoreError) and not caught.value.retryable
        with pytest.raises(SchemaMissingError):
            await WorkflowRunner(store, FAST).run_once("x")

        # Only one of the two tables: still named as missing.
        conn = sqlite3.connect(tmp_path / "empty.db")
        conn.execute("CREATE TABLE workflows (id TEXT PRIMARY KEY)")
        conn.commit()
        conn.close()
        with pytest.raises(SchemaMissingError, match="workflow_steps"):
            await store.load_steps("x")
    finally:
        await store.close()


# -- database URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["nosuch://x", "not a url", "", "   ", "sqlite+nodriver:///x.db", "://missing"]
)
def test_unknown_or_malformed_url_names_the_installed_forms(url: str) -> None:
    with pytest.raises(InvalidDatabaseURLError) as caught:
        durable_core.store_from_url(url)
    assert isinstance(caught.value, ConfigurationError)
    message = str(caught.value)
    forms = url_forms()
    assert "sqlite:///relative/path.db" in forms
    for form in forms:
        assert form in message


async def test_open_store_rejects_bad_urls_and_accepts_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DURABLE_DATABASE_URL", raising=False)
    with pytest.raises(InvalidDatabaseURLError, match="DURABLE_DATABASE_URL"):
        await durable_core.open_store()
    with pytest.raises(InvalidDatabaseURLError, match="nosuch"):
        await durable_core.open_store("nosuch://x")
    with pytest.raises(InvalidDatabaseURLError, match="SQLite"):
        SQLiteStore("postgresql://localhost/db")
    store = await durable_core.open_store(f"sqlite:///{tmp_path / 'ok.db'}")
    try:
        assert isinstance(store, SQLiteStore)
        await store.apply_schema()
        assert await store.list_workflows() == []
    finally:
        await store.close()


def test_password_in_a_bad_url_is_not_echoed() -> None:
    with pytest.raises(InvalidDatabaseURLError) as caught:
        durable_core.store_from_url("nosuch://user:hunter2@host/db")
    assert "hunter2" not in str(caught.value)


@workflow
async def receives_on(topic: str) -> Any:
    return await durable_core.recv(topic, timeout=60)


async def test_a_reserved_or_too_long_topic_is_refused_and_nothing_sent(
    sqlite_store: SQLiteStore,
) -> None:
    """``durable.*`` topics are durable-core's own (a saga's cancel request is a message on
    ``durable.cancel``): a caller can neither forge one nor take one."""
    client = DurableClient(sqlite_store)
    handle = await client.start_workflow(receives_on, "durable.cancel")
    for topic, said in (("durable.cancel", "is reserved"), ("t" * 201, "at most 200")):
        with pytest.raises(ConfigurationError, match=said):
            await client.send(handle.id, "stop", topic=topic)
    async with sqlite_store.engine.connect() as conn:
        assert (await conn.exec_driver_sql("SELECT count(*) FROM workflow_messages")).scalar() == 0
    assert await WorkflowRunner(sqlite_store, FAST).run_once(handle) is WorkflowStatus.FAILED
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.ConfigurationError"
    assert "topic 'durable.cancel' is reserved" in error["message"]
