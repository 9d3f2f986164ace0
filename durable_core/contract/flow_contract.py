"""``DebounceContract``: what a store with the
:class:`~durable_core.seams.store.Debouncer` role must do (schema version 10). A store
that has the role adds the class to its contract test class::

    class TestMyStore(StoreContract, NoClaimerContract, DebounceContract):
        pass
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import ClassVar

import anyio
import pytest

from ..seams.records import NewWorkflow, WorkflowStatus
from ..seams.store import Debouncer, Store
from .support import new_workflow, unique_name


def debouncer(store: Store) -> Debouncer:
    """``store`` as a :class:`Debouncer`, or a failure naming what it lacks."""
    if not isinstance(store, Debouncer):
        pytest.fail(
            f"{type(store).__name__} is not a Debouncer store (debounce): build it on "
            "durable_core.sql.SQLStore, or leave DebounceContract out",
            pytrace=False,
        )
    return store


def start(name: str, n: int) -> NewWorkflow:
    """A start of workflow ``name`` with the argument ``n``."""
    return new_workflow(name, input=json.dumps({"args": [n], "kwargs": {}}))


def argument(text: str) -> int:
    """The argument of a start's input."""
    value: int = json.loads(text)["args"][0]
    return value


class DebounceContract:
    """Tests of the :class:`~durable_core.seams.store.Debouncer` role."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture(scope="session")
    @classmethod
    def anyio_backend(cls) -> str:
        """The stores run on asyncio."""
        return "asyncio"

    async def test_starts_in_a_window_become_one_run_with_the_last_input(
        self, durable_store: Store
    ) -> None:
        store, name = debouncer(durable_store), unique_name("debounce")
        first = start(name, 1)
        run, written = await store.debounce(first, "k", 60, None)
        assert (run, written) == (first.id, True)
        opened = await durable_store.get_workflow(run)
        assert opened is not None and opened.status is WorkflowStatus.PENDING
        for n in (2, 3):
            later = start(name, n)
            assert await store.debounce(later, "k", 60, None) == (run, False)
            assert await durable_store.get_workflow(later.id) is None, "its row was dropped"
        row = await durable_store.get_workflow(run)
        assert row is not None and argument(row.input) == 3
        assert row.run_at >= opened.run_at, "each start pushes the run back"
        listed = await durable_store.list_workflows(name=name, limit=10)
        assert [r.id for r in listed] == [run]

    async def test_max_wait_caps_how_far_a_window_is_pushed(self, durable_store: Store) -> None:
        store, name = debouncer(durable_store), unique_name("debounce")
        run, _ = await store.debounce(start(name, 1), "k", 3600, 30)
        opened = await durable_store.get_workflow(run)
        assert opened is not None
        # The first start is due at its max_wait already (30 s < 3600 s); later ones stay.
        assert opened.run_at - opened.created_at <= timedelta(seconds=31)
        assert await store.debounce(start(name, 2), "k", 3600, None) == (run, False)
        row = await durable_store.get_workflow(run)
        assert row is not None and argument(row.input) == 2
        assert row.run_at - opened.created_at <= timedelta(seconds=31), "the cap holds"

    async def test_a_started_run_is_not_changed_and_opens_a_new_window(
        self, durable_store: Store
    ) -> None:
        store, name = debouncer(durable_store), unique_name("debounce")
        run, _ = await store.debounce(start(name, 1), "k", 60, None)
        claimed = await durable_store.acquire(run, worker_id="w", lease_seconds=30, due_only=False)
        assert claimed is not None
        after = start(name, 2)
        assert await store.debounce(after, "k", 60, None) == (after.id, True)
        row = await durable_store.get_workflow(run)
        assert row is not None and argument(row.input) == 1, "a started run keeps its input"
        assert await store.debounce(start(name, 3), "k", 60, None) == (after.id, False)

    async def test_keys_and_workflows_each_have_their_own_window(
        self, durable_store: Store
    ) -> None:
        store, name, other = debouncer(durable_store), unique_name("a"), unique_name("b")
        runs = {
            (await store.debounce(start(n, 1), key, 60, None))[0]
            for n, key in ((name, "k"), (name, "j"), (other, "k"))
        }
        assert len(runs) == 3

    async def test_concurrent_starts_of_one_key_agree_on_one_run(
        self, durable_store: Store, durable_second_store: Store
    ) -> None:
        name = unique_name("debounce")
        stores = [debouncer(durable_store), debouncer(durable_second_store)]
        runs: list[str] = []

        async def debounce(n: int) -> None:
            run, _ = await stores[n % 2].debounce(start(name, n), "k", 60, None)
            runs.append(run)

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(debounce, n)
        assert len(set(runs)) == 1, runs
        listed = await durable_store.list_workflows(name=name, limit=20)
        assert [r.id for r in listed] == runs[:1]
        assert argument(listed[0].input) in range(8)
