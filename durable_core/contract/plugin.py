"""The pytest plugin behind the contract suite (entry point ``durable_core_contract``).

It only supplies the default optional fixtures; the tests themselves come
from subclassing :class:`~durable_core.contract.StoreContract`. A module or
conftest that defines a fixture of the same name overrides these defaults.
"""

from __future__ import annotations

import pytest

# The contract classes use plain asserts: have pytest rewrite them for readable failures.
pytest.register_assert_rewrite(
    "durable_core.contract.base",
    "durable_core.contract.caller_contract",
    "durable_core.contract.run_contract",
    "durable_core.contract.attempt_contract",
    "durable_core.contract.admin_contract",
    "durable_core.contract.engine_contract",
    "durable_core.contract.waiting_contract",
    "durable_core.contract.schedule_contract",
    "durable_core.contract.schedule_overlap_contract",
    "durable_core.contract.claimer_contract",
    "durable_core.contract.listing_contract",
    "durable_core.contract.talk_contract",
)

from ..seams.store import Store  # noqa: E402
from .support import Tamper, default_tamper  # noqa: E402


@pytest.fixture
def durable_second_store(durable_store: Store) -> Store:
    """A second store instance on the same database; by default ``durable_store`` itself."""
    return durable_store


@pytest.fixture
def durable_tamper(durable_store: Store) -> Tamper:
    """Writes raw values into stored rows (to simulate corruption)."""
    return default_tamper(durable_store)
