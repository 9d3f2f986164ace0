"""``TransactionContract``: what a store that runs transaction steps on its own database
(a :class:`~durable_core.seams.transactions.TransactionalStore`) must do. Its
``step_database()`` opens a transaction whose connection the step's body writes on, and
records the step's output as its row in that same transaction, fenced by the lease: the
writes and the row commit together, or neither does. A store that has it adds the class::

    class TestMyStore(StoreContract, NoClaimerContract, TransactionContract):
        pass
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from ..errors import LeaseLostError
from ..seams.records import StepStatus
from ..seams.store import Store
from ..seams.transactions import StepDatabase, TransactionalStore, TransactionCall
from .base import STALE_KINDS, ContractBase

_metadata = sa.MetaData()
_writes = sa.Table(
    "contract_transaction_writes",
    _metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("workflow_id", sa.String(64), nullable=False),
)


def database(store: Store) -> StepDatabase:
    """``store``'s database for transaction steps (the test fails when it has none)."""
    if not isinstance(store, TransactionalStore):
        pytest.fail(
            f"{type(store).__name__} has no step_database(): drop TransactionContract, or "
            "build the store on durable_core.sql.SQLStore",
            pytrace=False,
        )
    return store.step_database()


class TransactionContract(ContractBase):
    """Tests of a store's transaction steps on its own database."""

    @pytest.fixture
    async def writes(self, durable_store: Store) -> AsyncIterator[StepDatabase]:
        """The store's database, with the table the tests' bodies write to."""
        found = database(durable_store)
        async with found.transaction(None, "read committed") as made:
            await made.connection.run_sync(_metadata.create_all)
        yield found
        async with found.transaction(None, "read committed") as dropped:
            await dropped.connection.run_sync(_metadata.drop_all)

    async def _written(self, found: StepDatabase, workflow_id: str) -> list[str]:
        async with found.transaction(None, "read committed") as reading:
            rows = await reading.connection.execute(
                sa.select(_writes.c.id).where(_writes.c.workflow_id == workflow_id)
            )
            return [row.id for row in rows]

    @pytest.mark.parametrize("isolation", ["read committed", "repeatable read", "serializable"])
    async def test_the_body_writes_and_the_step_row_commit_together(
        self, durable_store: Store, writes: StepDatabase, isolation: str
    ) -> None:
        held = await self._held(durable_store)
        call = TransactionCall(held.lease, 0, "contract.tx", '{"args":[],"kwargs":{}}', "0", False)
        async with writes.transaction(call, isolation) as transaction:  # type: ignore[arg-type]
            assert await transaction.recorded() is None
            await transaction.connection.execute(
                _writes.insert().values(id=str(uuid.uuid4()), workflow_id=held.id)
            )
            await transaction.record(json.dumps("done"), new_try=True)
        [step] = await durable_store.load_steps(held.id)
        assert (step.step_index, step.step_name, step.status, step.output, step.attempts) == (
            0,
            "contract.tx",
            StepStatus.SUCCEEDED,
            '"done"',
            1,
        )
        assert len(await self._written(writes, held.id)) == 1
        again = TransactionCall(held.lease, 0, "contract.tx", call.input, "0", True)
        async with writes.transaction(again, "read committed") as looked:
            assert await looked.recorded() == '"done"', "a try that checks finds the record"

    async def test_a_body_that_raises_leaves_neither(
        self, durable_store: Store, writes: StepDatabase
    ) -> None:
        held = await self._held(durable_store)
        call = TransactionCall(held.lease, 0, "contract.tx", "[]", "0", False)
        with pytest.raises(RuntimeError, match="the body failed"):
            async with writes.transaction(call, "read committed") as transaction:
                await transaction.connection.execute(
                    _writes.insert().values(id=str(uuid.uuid4()), workflow_id=held.id)
                )
                raise RuntimeError("the body failed")
        assert await durable_store.load_steps(held.id) == []
        assert await self._written(writes, held.id) == []

    @pytest.mark.parametrize("kind", STALE_KINDS)
    @pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
    async def test_a_lease_that_no_longer_holds_commits_nothing(
        self, durable_store: Store, writes: StepDatabase, kind: str, isolation: str
    ) -> None:
        stale, _current = await self.stale_lease(durable_store, kind)
        before = await durable_store.load_steps(stale.workflow_id)
        call = TransactionCall(stale, 5, "contract.tx", "[]", "5", False)
        with pytest.raises(LeaseLostError):
            async with writes.transaction(call, isolation) as transaction:  # type: ignore[arg-type]
                await transaction.connection.execute(
                    _writes.insert().values(id=str(uuid.uuid4()), workflow_id=stale.workflow_id)
                )
                await transaction.record('"zombie"', new_try=True)
        assert await durable_store.load_steps(stale.workflow_id) == before
        assert await self._written(writes, stale.workflow_id) == []
