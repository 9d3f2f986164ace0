"""The store contract suite: the tests every durable-core store must pass.

It ships as a pytest plugin (entry point ``durable_core_contract``, loaded
automatically once durable-core is installed). A store author writes one
fixture and subclasses the contract classes::

    # tests/test_my_store.py
    import pytest
    from durable_core.contract import NoClaimerContract, StoreContract

    from my_store import MyStore


    @pytest.fixture
    async def durable_store(tmp_path):
        store = MyStore(f"my+sqlite:///{tmp_path / 'durable.db'}")
        await store.open()
        await store.apply_schema()  # the tables must start empty
        yield store
        await store.close()


    class TestMyStore(StoreContract, NoClaimerContract):
        pass

That is the whole suite, for a store that plays every role of
:mod:`durable_core.seams.roles`. A store (or a fake) that plays fewer subclasses
the class of each role it plays instead: :class:`CallerContract` (enqueue and
read; no other role needed), :class:`RunContract`, :class:`AttemptContract`,
:class:`AdminContract`, :class:`ScheduleContract`, and those that need several:
:class:`WaitingContract`, :class:`EffectsContract` (a body's effects, fenced),
:class:`TransactionContract` (transaction steps on the store's own database),
:class:`EngineContract` (through the executor, what
a :class:`~durable_core.testing.WorkflowRunner` needs), :class:`ListingContract`.

A store that claims (a :class:`~durable_core.seams.store.Claimer`) adds
:class:`ClaimerContract` instead of :class:`NoClaimerContract`, and
:class:`LivenessContract` when it ties a worker's liveness to a database session
(a :class:`~durable_core.seams.store.WorkerLiveness`). Optional
fixtures: ``durable_second_store`` (a second instance on the same database,
for the concurrency tests) and ``durable_tamper`` (to corrupt rows; the
default works for stores that expose a SQLAlchemy ``engine``). The suite runs
on asyncio through anyio's pytest plugin; the classes pin ``anyio_backend``.
With plugin autoloading off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), pass
``-p anyio -p durable_core.contract.plugin``.

The names below are imported on first use, so the plugin, which pytest loads
in every session, registers none of the suite's workflows until a test
module asks for a contract class.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .admin_contract import AdminContract
    from .attempt_contract import AttemptContract
    from .attributes_contract import AttributesContract
    from .base import ContractBase
    from .caller_contract import CallerContract
    from .claimer_contract import ClaimerContract, NoClaimerContract
    from .compensation_contract import CompensationContract
    from .effects_contract import EffectsContract
    from .engine_contract import EngineContract
    from .erasure_contract import ErasureContract
    from .flow_contract import DebounceContract
    from .listing_contract import ListingContract
    from .liveness_contract import LivenessContract
    from .retention_contract import RetentionContract
    from .run_contract import RunContract
    from .schedule_contract import ScheduleContract
    from .schedule_overlap_contract import ScheduleOverlapContract
    from .store_contract import StoreContract
    from .support import Tamper, default_tamper, engine_tamper
    from .talk_contract import StreamsContract, UpdatesContract
    from .transaction_contract import TransactionContract
    from .waiting_contract import WaitingContract

_WHERE = {
    "AttributesContract": "attributes_contract",
    "AdminContract": "admin_contract",
    "AttemptContract": "attempt_contract",
    "CallerContract": "caller_contract",
    "EffectsContract": "effects_contract",
    "ContractBase": "base",
    "EngineContract": "engine_contract",
    "ErasureContract": "erasure_contract",
    "ListingContract": "listing_contract",
    "LivenessContract": "liveness_contract",
    "RetentionContract": "retention_contract",
    "RunContract": "run_contract",
    "ScheduleContract": "schedule_contract",
    "WaitingContract": "waiting_contract",
    "ClaimerContract": "claimer_contract",
    "DebounceContract": "flow_contract",
    "NoClaimerContract": "claimer_contract",
    "CompensationContract": "compensation_contract",
    "ScheduleOverlapContract": "schedule_overlap_contract",
    "StoreContract": "store_contract",
    "StreamsContract": "talk_contract",
    "TransactionContract": "transaction_contract",
    "UpdatesContract": "talk_contract",
    "Tamper": "support",
    "default_tamper": "support",
    "engine_tamper": "support",
}

__all__ = [
    "AttributesContract",
    "AdminContract",
    "AttemptContract",
    "CallerContract",
    "ContractBase",
    "EffectsContract",
    "EngineContract",
    "ErasureContract",
    "ListingContract",
    "LivenessContract",
    "RetentionContract",
    "RunContract",
    "ScheduleContract",
    "WaitingContract",
    "ClaimerContract",
    "CompensationContract",
    "DebounceContract",
    "NoClaimerContract",
    "ScheduleOverlapContract",
    "StoreContract",
    "StreamsContract",
    "Tamper",
    "TransactionContract",
    "UpdatesContract",
    "default_tamper",
    "engine_tamper",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
