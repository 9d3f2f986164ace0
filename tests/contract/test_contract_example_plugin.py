"""The contract suite against the example third-party store plugin.

``tests/example_store_plugin`` is its own distribution (install it with
``pip install -e tests/example_store_plugin``). durable-core finds its store
only through the ``durable_core`` entry point, by URL.
"""

from __future__ import annotations

import importlib.metadata
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import closing
from pathlib import Path

import anyio.to_thread
import pytest
from durable_example_store import ExampleStore

from durable_core import store_from_url
from durable_core.caller.backends import url_forms
from durable_core.contract import (
    AdminContract,
    AttemptContract,
    CallerContract,
    EffectsContract,
    EngineContract,
    ListingContract,
    NoClaimerContract,
    RunContract,
    StoreContract,
    Tamper,
    WaitingContract,
)
from durable_core.definitions.queues import Route
from durable_core.errors import InvalidDatabaseURLError, RoleNotSupportedError
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.plugins import plugin_manager
from durable_core.seams.records import ClaimedWorkflow
from durable_core.seams.roles import ROLES, RUNNER_ROLES, ScheduleStore, lacking
from durable_core.seams.store import Claimer, Store


def _url(tmp_path: Path) -> str:
    return f"example+sqlite:///{tmp_path / 'example.db'}"


@pytest.fixture
async def durable_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = store_from_url(_url(tmp_path))
    await store.open()
    await store.apply_schema()
    yield store
    await store.close()


@pytest.fixture
async def durable_second_store(tmp_path: Path, durable_store: Store) -> AsyncIterator[Store]:
    store = store_from_url(_url(tmp_path))
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def durable_tamper(tmp_path: Path) -> Tamper:
    """The example store exposes no SQLAlchemy engine: corrupt rows with the sqlite3 module."""
    path = tmp_path / "example.db"

    async def tamper(
        table: str,
        column: str,
        value: str | None,
        *,
        workflow_id: str,
        step_index: int | None = None,
    ) -> None:
        if table == "workflows":
            sql = f"UPDATE workflows SET {column} = ? WHERE id = ?"
            params: list[str | int | None] = [value, workflow_id]
        else:
            sql = f"UPDATE workflow_steps SET {column} = ? WHERE workflow_id = ? AND step_index = ?"
            params = [value, workflow_id, step_index]

        def write() -> int:
            with closing(sqlite3.connect(path, timeout=10)) as conn, conn:
                return conn.execute(sql, params).rowcount

        assert await anyio.to_thread.run_sync(write) == 1

    return tamper


class TestExampleStorePlugin(
    CallerContract,
    RunContract,
    AttemptContract,
    AdminContract,
    EngineContract,
    WaitingContract,
    EffectsContract,
    ListingContract,
    NoClaimerContract,
):
    """The contracts of the roles the example store plays: every one but schedules."""


def test_the_store_is_found_only_through_its_entry_point(tmp_path: Path) -> None:
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="durable_core") if ep.name == "example"
    ]
    assert entry_point.value == "durable_example_store.plugin"
    assert entry_point.dist is not None and entry_point.dist.name == "durable-example-store"
    assert plugin_manager().get_plugin("example") is entry_point.load()
    store: object = store_from_url(_url(tmp_path))
    assert type(store) is ExampleStore
    assert not isinstance(store, Claimer)
    assert [role for role in ROLES if lacking(store, role)] == [ScheduleStore]
    assert not isinstance(store, Store) and all(isinstance(store, r) for r in RUNNER_ROLES)
    assert "example+sqlite:///path.db" in url_forms()


class ClaimingExampleStore(ExampleStore):
    """The example store given a claimer: it still keeps no schedules."""

    async def claim(
        self, *, worker_id: str, limit: int, lease_seconds: float, routes: Sequence[Route]
    ) -> list[ClaimedWorkflow]:
        raise AssertionError("the worker refuses this store before it claims")

    async def wait_for_work(self, timeout: float) -> None:
        raise AssertionError("the worker refuses this store before it waits for work")


@pytest.mark.anyio
async def test_the_worker_refuses_at_boot_a_store_without_a_role_it_needs(
    tmp_path: Path,
) -> None:
    store = ClaimingExampleStore(_url(tmp_path))
    assert isinstance(store, Claimer)
    with pytest.raises(RoleNotSupportedError) as refused:
        await WorkflowWorker(store).run()  # type: ignore[arg-type]  # what a plugin may return
    assert str(refused.value) == (
        f"example store at {tmp_path / 'example.db'} does not play the ScheduleStore role (it "
        "lacks add_schedule(), update_schedule(), get_schedule(), list_schedules(), "
        "set_schedule_paused(), delete_schedule(), due_schedules(), next_schedule_tick(), "
        "fire_schedule()): the worker needs it"
    )


def test_an_unknown_url_names_the_example_backend() -> None:
    with pytest.raises(InvalidDatabaseURLError, match=r"example\+sqlite:///path\.db"):
        store_from_url("nosuchdb://somewhere/db")


# -- the second route: the shared SQL rules over a dialect and a connector --------------------


class TestExampleSQLStorePlugin(StoreContract, NoClaimerContract):
    """The same suite, for the store built from ``durable_core.sql`` by a third party."""

    @pytest.fixture
    async def durable_store(self, tmp_path: Path) -> AsyncIterator[Store]:
        store = store_from_url(f"example+sql:///{tmp_path / 'example-sql.db'}")
        await store.open()
        await store.apply_schema()
        yield store
        await store.close()

    @pytest.fixture
    def durable_tamper(self, durable_store: Store) -> Tamper:
        from durable_example_store import ExampleSQLStore

        from durable_core.contract import engine_tamper

        assert isinstance(durable_store, ExampleSQLStore)
        return engine_tamper(durable_store.connector.engine)

    @pytest.fixture
    async def durable_second_store(self, durable_store: Store) -> Store:
        return durable_store


def test_the_sql_route_store_is_found_by_its_url(tmp_path: Path) -> None:
    from durable_example_store import ExampleSQLStore

    from durable_core.sql import SQLStore

    store = store_from_url(f"example+sql:///{tmp_path / 'x.db'}")
    assert type(store) is ExampleSQLStore and isinstance(store, SQLStore)
    assert isinstance(store, Store) and not isinstance(store, Claimer)
    assert lacking(store, Store) == [], "the shared SQL rules play every role"
    assert "example+sql:///path.db" in url_forms()
