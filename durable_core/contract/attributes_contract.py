"""``AttributesContract``: what a store with the
:class:`~durable_core.seams.attributes.Attributes` role must do (schema version 9). A store
that has the role adds the class to its contract test class::

    class TestMyStore(StoreContract, NoClaimerContract, AttributesContract):
        pass
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import ClassVar

import anyio
import pytest

from ..errors import ConfigurationError, LeaseLostError, WorkflowNotFoundError
from ..seams.attributes import AttributeRange, Attributes, AttributeValue
from ..seams.records import StepStatus, WorkflowStatus
from ..seams.store import Store
from .base import STALE_KINDS, stale_lease
from .support import new_workflow, snapshot, unique_name
from .talk_contract import held


def attributes(store: Store) -> Attributes:
    """``store`` as an :class:`Attributes`, or a failure naming what it lacks."""
    if not isinstance(store, Attributes):
        pytest.fail(
            f"{type(store).__name__} is not an Attributes store (record_attributes, "
            "set_attributes, get_attributes, list_by_attributes): build it on "
            "durable_core.sql.SQLStore, or leave AttributesContract out",
            pytrace=False,
        )
    return store


def token() -> str:
    """A text value no other test uses (the tables may hold other tests' rows)."""
    return f"c-{uuid.uuid4().hex[:12]}"


class AttributesContract:
    """Tests of the :class:`~durable_core.seams.attributes.Attributes` role."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    async def test_a_body_sets_them_with_its_step_recorded_under_its_lease(
        self, durable_store: Store
    ) -> None:
        a = attributes(durable_store)
        claimed = await held(durable_store)
        name = "durable.set_attributes"
        values: dict[str, AttributeValue | None] = {
            "customer": "acme",
            "amount": 120.5,
            "rush": True,
            "items": 3,
        }
        await a.record_attributes(claimed.lease, values, 0, name, '["amount"]')
        await a.record_attributes(claimed.lease, {"rush": None}, 1, name, '["rush"]', path="1")
        assert await a.get_attributes(claimed.id) == {
            "amount": 120.5,
            "customer": "acme",
            "items": 3,
        }
        steps = await durable_store.load_steps(claimed.id)
        assert [(s.step_index, s.step_name, s.status) for s in steps] == [
            (0, name, StepStatus.SUCCEEDED),
            (1, name, StepStatus.SUCCEEDED),
        ]
        # A lease taken over fences the old holder out, with nothing written.
        stale = dataclasses.replace(claimed.lease, token=str(uuid.uuid4()))
        with pytest.raises(LeaseLostError):
            await a.record_attributes(stale, {"customer": "other"}, 2, name, "[]")
        assert (await a.get_attributes(claimed.id))["customer"] == "acme"
        assert len(await durable_store.load_steps(claimed.id)) == 2

    @pytest.mark.parametrize("kind", STALE_KINDS)
    async def test_a_lease_that_lost_the_workflow_cannot_set_them(
        self, durable_store: Store, kind: str
    ) -> None:
        a = attributes(durable_store)
        stale, _ = await stale_lease(durable_store, kind)
        before = await snapshot(durable_store, stale.workflow_id)
        with pytest.raises(LeaseLostError):
            await a.record_attributes(stale, {"owner": "late"}, 2, "durable.set_attributes", "[]")
        assert await a.get_attributes(stale.workflow_id) == {}
        assert await snapshot(durable_store, stale.workflow_id) == before

    async def test_a_caller_sets_changes_and_removes_them_in_any_state(
        self, durable_store: Store
    ) -> None:
        a = attributes(durable_store)
        row = new_workflow()
        await durable_store.enqueue([row])
        await a.set_attributes(row.id, {"region": "eu", "amount": 10})
        await a.set_attributes(row.id, {"region": "us", "amount": None, "vip": False})
        assert await a.get_attributes(row.id) == {"region": "us", "vip": False}
        with pytest.raises(WorkflowNotFoundError, match="no-such-workflow"):
            await a.set_attributes("no-such-workflow", {"region": "eu"})
        assert await a.get_attributes("no-such-workflow") == {}
        with pytest.raises(ConfigurationError, match="attribute name"):
            await a.set_attributes(row.id, {"no spaces": 1})
        with pytest.raises(ConfigurationError, match="at most 255 characters"):
            await a.set_attributes(row.id, {"note": "x" * 256})
        assert await a.get_attributes(row.id) == {"region": "us", "vip": False}

    async def test_a_start_writes_them_with_the_row_and_a_repeat_changes_nothing(
        self, durable_store: Store
    ) -> None:
        a = attributes(durable_store)
        customer = token()
        row = dataclasses.replace(new_workflow(), attributes={"customer": customer, "n": 1})
        plain = new_workflow()
        assert set(await durable_store.enqueue([row, plain])) == {row.id, plain.id}
        assert await a.get_attributes(row.id) == {"customer": customer, "n": 1}
        assert await a.get_attributes(plain.id) == {}
        again = dataclasses.replace(row, attributes={"customer": "someone else"})
        assert list(await durable_store.enqueue([again])) == []
        assert await a.get_attributes(row.id) == {"customer": customer, "n": 1}
        one = dataclasses.replace(new_workflow(), attributes={"customer": customer})
        assert list(await durable_store.enqueue([one])) == [one.id]
        listed = await a.list_by_attributes({"customer": customer})
        assert [r.id for r in listed] == [one.id, row.id]

    async def test_lists_match_every_filter_by_type_newest_first(
        self, durable_store: Store
    ) -> None:
        a = attributes(durable_store)
        customer, name = token(), unique_name("attributes")
        rows = [new_workflow(name) for _ in range(6)]
        for i, row in enumerate(rows):
            await durable_store.enqueue([row])
            await a.set_attributes(
                row.id, {"customer": customer, "amount": i * 10, "rush": i % 2 == 0}
            )
            await anyio.sleep(0.003)
        other = new_workflow(name)
        await durable_store.enqueue([other])
        await a.set_attributes(other.id, {"customer": token(), "amount": 20})
        ids = [r.id for r in rows]

        async def found(**filters: object) -> list[str]:
            listed = await a.list_by_attributes({"customer": customer, **filters})  # type: ignore[dict-item]
            return [r.id for r in listed]

        assert await found() == ids[::-1]
        assert await found(amount=20) == [ids[2]]
        assert await found(amount=AttributeRange(10, 30)) == [ids[3], ids[2], ids[1]]
        assert await found(amount=AttributeRange(min=35)) == [ids[5], ids[4]]
        assert await found(amount=AttributeRange(max=0)) == [ids[0]]
        assert await found(rush=True) == [ids[4], ids[2], ids[0]]
        assert await found(rush=False, amount=AttributeRange(20, 50)) == [ids[5], ids[3]]
        # A filter matches values of its own type: the text "20" is not the number 20.
        assert await found(amount="20") == []
        assert await found(customer="nobody") == []
        assert await found(missing=1) == []
        listed = await a.list_by_attributes({"amount": 20}, name=name)
        assert {r.id for r in listed} == {ids[2], other.id}

    async def test_attribute_lists_page_and_take_the_other_filters(
        self, durable_store: Store
    ) -> None:
        a = attributes(durable_store)
        customer = token()
        # One batch: its rows may share a created_at, so ids break the tie.
        rows = [
            dataclasses.replace(new_workflow(), attributes={"customer": customer}) for _ in range(7)
        ]
        await durable_store.enqueue(rows)
        everything = await a.list_by_attributes({"customer": customer}, limit=100)
        order = [(r.created_at, r.id) for r in everything]
        assert order == sorted(order, reverse=True) and len(order) == 7
        pages: list[list[str]] = []
        before: str | None = None
        while True:
            page = await a.list_by_attributes({"customer": customer}, limit=3, before=before)
            if not page:
                break
            pages.append([r.id for r in page])
            before = page[-1].id
        assert [len(p) for p in pages] == [3, 3, 1]
        assert [i for p in pages for i in p] == [r.id for r in everything]
        claimed = await durable_store.acquire(rows[3].id, worker_id="w", lease_seconds=30)
        assert claimed is not None
        running = await a.list_by_attributes({"customer": customer}, status=WorkflowStatus.RUNNING)
        assert [r.id for r in running] == [rows[3].id]
        newest = everything[0].created_at
        later = await a.list_by_attributes({"customer": customer}, created_after=newest)
        assert {r.id for r in later} == {r.id for r in everything if r.created_at >= newest}
        earlier = await a.list_by_attributes({"customer": customer}, created_before=newest)
        assert [r.id for r in earlier] == [r.id for r in everything if r.created_at < newest]
        assert await a.list_by_attributes({"customer": customer}, queue="elsewhere") == []
