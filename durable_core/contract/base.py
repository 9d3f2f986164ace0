"""What every contract class shares: the test-process clock checks, rows to enqueue and
lease, the runner, and the check that a store has the operations a test needs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from ..runtime.config import WorkflowConfig
from ..seams.records import (
    ClaimedWorkflow,
    Lease,
    Settlement,
    Wait,
    WaitKind,
    WorkflowRecord,
    WorkflowStatus,
)
from ..seams.roles import CallerStore
from ..seams.store import Store
from ..testing import WorkflowRunner
from . import workflows as wfs
from .support import (
    SAFETY_SECONDS,
    new_workflow,
    unique_name,
)

OPERATIONS = (
    "record_step",
    "suspend",
    "receive",
    "send",
    "set_event",
    "get_event",
    "record_attempt",
    "load_attempts",
)
"""The store operations durable waits need (schema version 3)."""


def require(store: object, *operations: str) -> None:
    """Fail, naming what is missing, when ``store`` lacks an operation waiting needs."""
    missing = [name for name in operations if not callable(getattr(store, name, None))]
    if missing:
        pytest.fail(
            f"{type(store).__name__} lacks {', '.join(f'{name}()' for name in missing)}: "
            "the Store protocol needs them for workflows that wait (durable sleep, messages, "
            "events, child workflows). Implement them, or build the store on "
            "durable_core.sql.SQLStore, which has them.",
            pytrace=False,
        )


def wait_for(
    kind: WaitKind,
    key: str = "",
    deadline: datetime | None = None,
    *,
    index: int = 0,
    output: str = "null",
    path: str | None = None,
) -> Wait:
    name = f"durable.{kind.value}"
    return Wait(kind, key, deadline, index, name, json.dumps([key]), output, path)


STALE_KINDS = ("reclaimed", "settled", "cancelled", "forged", "unknown_workflow")
"""How a lease comes not to hold its workflow (:func:`stale_lease`)."""


async def stale_lease(
    store: Store,
    kind: str,
    *,
    short_lease: float = 0.05,
    first: Callable[[Lease], Awaitable[object]] | None = None,
) -> tuple[Lease, Lease | None]:
    """A lease that no longer holds its workflow, and the lease that does (if any): another
    worker took it over once it expired (``reclaimed``, held ``short_lease`` seconds), its
    attempt ``settled``, it was ``cancelled``, or it never held it (``forged``: another
    token; ``unknown_workflow``).

    The stale holder recorded step 0 (succeeded) and step 1 (running) first, then did
    ``first(lease)`` (if given) while it still held it.
    """
    if kind == "unknown_workflow":
        return Lease(new_workflow().id, "token-of-nothing", "worker-a"), None
    row = new_workflow()
    await store.enqueue([row])
    lease_seconds = short_lease if kind == "reclaimed" else 30.0
    claimed = await store.acquire(row.id, worker_id="worker-a", lease_seconds=lease_seconds)
    assert claimed is not None, "a fresh pending workflow must be acquirable"
    stale = claimed.lease
    await store.start_step(stale, 0, "s0", '"in0"')
    await store.complete_step(stale, 0, '"out0"')
    await store.start_step(stale, 1, "s1", '"in1"')
    if first is not None:
        await first(stale)
    current: Lease | None = None
    if kind == "reclaimed":
        await anyio.sleep(short_lease * 2 + 0.05)
        reclaimed = await store.acquire(claimed.id, worker_id="worker-b", lease_seconds=30)
        assert reclaimed is not None
        current = reclaimed.lease
    elif kind == "settled":
        await store.settle(Settlement(stale, WorkflowStatus.SUCCEEDED, output='"done"'))
    elif kind == "cancelled":
        await store.cancel_workflow(claimed.id)
    elif kind == "forged":
        current = stale
        stale = Lease(claimed.id, "forged-" + stale.token[:20], stale.worker_id)
    else:
        raise AssertionError(kind)
    return stale, current


class ContractBase:
    """The shared support of the contract classes: each role's class (and
    :class:`~durable_core.contract.StoreContract`, their union) derives from it.

    Class attributes tune timing: ``clock_tolerance`` is how far a store's clock may be
    from the test process's, ``short_lease`` the lease (seconds) used to make one expire.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    clock_tolerance: ClassVar[timedelta] = timedelta(seconds=5)
    short_lease: ClassVar[float] = 0.05
    big_payload_megabytes: ClassVar[tuple[int, ...]] = (1, 5)
    concurrent_writers: ClassVar[int] = 20

    @pytest.fixture(scope="session")
    @classmethod
    def anyio_backend(cls) -> str:
        """The stores run on asyncio (SQLAlchemy's async engine and asyncpg need it)."""
        return "asyncio"

    # -- helpers --------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def contract_started_at(self) -> datetime:
        """When this test began: what the store stamps during it comes after."""
        self.started_at = datetime.now(UTC)
        return self.started_at

    def assert_near_now(self, moment: datetime | None, *, offset: float = 0.0) -> None:
        """``moment`` is aware UTC and ``offset`` seconds after a time during this test
        (between its start and now), within ``clock_tolerance``: however slow the machine."""
        assert moment is not None
        assert moment.tzinfo is not None, f"{moment!r} is naive; stores return aware UTC times"
        assert moment.utcoffset() == timedelta(0), f"{moment!r} is not in UTC"
        shift = timedelta(seconds=offset)
        earliest = self.started_at + shift - self.clock_tolerance
        latest = datetime.now(UTC) + shift + self.clock_tolerance
        assert earliest <= moment <= latest, f"{moment} is not between {earliest} and {latest}"

    async def enqueue_one(self, store: CallerStore, **options: Any) -> str:
        row = new_workflow(**options)
        await store.enqueue([row])
        return row.id

    async def acquired(
        self,
        store: Store,
        *,
        worker_id: str = "worker-a",
        lease_seconds: float = 30.0,
        **options: Any,
    ) -> ClaimedWorkflow:
        """Enqueue a workflow and take its lease."""
        workflow_id = await self.enqueue_one(store, **options)
        claimed = await store.acquire(workflow_id, worker_id=worker_id, lease_seconds=lease_seconds)
        assert claimed is not None, "a fresh pending workflow must be acquirable"
        return claimed

    async def stale_lease(self, store: Store, kind: str) -> tuple[Lease, Lease | None]:
        """:func:`stale_lease`, a reclaimed lease held ``short_lease`` seconds."""
        return await stale_lease(store, kind, short_lease=self.short_lease)

    async def expire(self) -> None:
        """Wait until a lease of ``short_lease`` seconds has expired."""
        await anyio.sleep(self.short_lease * 2 + 0.05)

    async def record(self, store: CallerStore, workflow_id: str) -> WorkflowRecord:
        found = await store.get_workflow(workflow_id)
        assert found is not None, f"workflow {workflow_id} vanished"
        return found

    async def _held(self, store: Store, **options: Any) -> ClaimedWorkflow:
        require(store, *OPERATIONS)
        row = new_workflow(**options)
        await store.enqueue([row])
        claimed = await store.acquire(row.id, worker_id="waiter", lease_seconds=30)
        assert claimed is not None
        return claimed

    async def _row(self, store: CallerStore, workflow_id: str) -> WorkflowRecord:
        found = await store.get_workflow(workflow_id)
        assert found is not None, f"workflow {workflow_id} vanished"
        return found

    async def _acquired_once_due(self, store: Store, workflow_id: str) -> ClaimedWorkflow:
        """Acquire a waiting workflow as soon as it is due, and never before its ``wake_at``:
        when an acquire hands it out, ``wake_at`` had passed by the time it answered."""
        wake_at = (await self._row(store, workflow_id)).wake_at
        assert wake_at is not None
        with anyio.fail_after(SAFETY_SECONDS):
            while True:  # the store's clock decides when: nothing to wait on but time
                got = await store.acquire(workflow_id, worker_id="w", lease_seconds=30)
                if got is not None:
                    break
                await anyio.sleep(0.05)
        answered = datetime.now(UTC)
        assert answered >= wake_at, f"handed out at {answered}, due at {wake_at}"
        return got

    async def _parent_and_child(self, store: Store) -> tuple[ClaimedWorkflow, ClaimedWorkflow]:
        parent = await self._held(store)
        row = dataclasses.replace(new_workflow(), parent_id=parent.id)
        assert list(await store.enqueue([row])) == [row.id]
        assert (await self._row(store, row.id)).parent_id == parent.id
        child = await store.acquire(row.id, worker_id="child", lease_seconds=30)
        assert child is not None and child.parent_id == parent.id
        return parent, child

    def runner(self, store: Store) -> WorkflowRunner:
        return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0), worker_id="contract")

    @pytest.fixture
    def key(self) -> Iterator[str]:
        """A fresh key for the contract workflows, forgotten afterwards."""
        value = unique_name("key")
        yield value
        wfs.forget(value)
