"""The store's roles: ``Store`` is their union, every SQL store plays each of them, and
code given a store that lacks a role it needs refuses it, naming the role."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_core import DurableClient, RoleNotSupportedError
from durable_core.seams import roles
from durable_core.seams.roles import ROLES, lacking, require_roles
from durable_core.seams.store import Store
from durable_sqlite import SQLiteStore


def test_store_is_the_union_of_the_roles_each_member_in_one_role() -> None:
    members = [name for role in ROLES for name in roles._members(role)]
    assert len(members) == len(set(members)), "a member belongs to one role"
    assert set(members) == set(roles._members(Store))
    assert all(role in Store.__mro__ for role in ROLES)


def test_every_sql_store_plays_every_role(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'roles.db'}")
    assert lacking(store, Store) == []
    assert all(isinstance(store, role) for role in ROLES)


class ReadsOnly:
    """A store that only reads: it plays no role whole."""

    description = "a reading store"

    async def get_workflow(self, workflow_id: str) -> None:
        return None


def test_a_missing_role_is_named_with_what_it_lacks() -> None:
    with pytest.raises(RoleNotSupportedError) as refused:
        require_roles(ReadsOnly(), ROLES, needed_by="the worker")
    assert str(refused.value) == (
        "a reading store does not play the Lifecycle role (it lacks open(), close(), "
        "apply_schema(), check_schema()): the worker needs it"
    )


@pytest.mark.anyio
async def test_the_client_refuses_a_schedule_call_on_a_store_without_schedules(
    tmp_path: Path,
) -> None:
    from durable_example_store import ExampleStore

    store = ExampleStore(f"example+sqlite:///{tmp_path / 'roles.db'}")
    client = DurableClient(store)
    with pytest.raises(
        RoleNotSupportedError,
        match=r"the ScheduleStore role .*list_schedules\(\).*: a schedule call needs it",
    ):
        await client.list_schedules()
