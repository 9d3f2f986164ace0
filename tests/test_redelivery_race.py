"""A message redelivered while its workflow takes the first copy: no deadlock.

``send`` locks the workflow row, then inserts the message (which waits on a copy
being deleted under the same idempotency key); ``receive`` must take the locks
in that order too, or each waits for the other and the database kills one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable

import anyio
import pytest

from durable_core import DurableClient, recv, workflow
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from durable_mysql import MySQLStore
from durable_postgres import PostgresStore
from tests.conftest import fresh_postgres_database

pytestmark = pytest.mark.anyio

ROUNDS = 40


@workflow
async def take_payment() -> str:
    payment: str = await recv("payment")
    return payment


@pytest.fixture(params=["postgresql", "mysql"])
async def store(
    request: pytest.FixtureRequest, postgres_url: str, mysql_url: str
) -> AsyncIterator[Store]:
    opened: Store
    if request.param == "postgresql":
        base = postgres_url.rsplit("/", 1)[-1].split("?")[0]
        opened = PostgresStore(await fresh_postgres_database(postgres_url, f"{base}_redelivery"))
    else:
        opened = MySQLStore(mysql_url)
    async with opened:
        await opened.apply_schema()
        yield opened


async def test_a_redelivery_during_the_receive_neither_fails_nor_deadlocks(store: Store) -> None:
    client, runner = DurableClient(store), WorkflowRunner(store)
    failures: list[BaseException] = []

    async def attempt(call: Awaitable[object]) -> None:
        try:
            await call
        except Exception as exc:
            failures.append(exc)

    for number in range(ROUNDS):
        handle = await client.start_workflow(take_payment)
        await runner.run_once(handle)
        key = f"evt-{handle.id}"
        await client.send(handle.id, "paid", topic="payment", idempotency_key=key)
        async with anyio.create_task_group() as group:
            group.start_soon(attempt, runner.run_once(handle))  # takes the message
            for _ in range(3):  # while the sender delivers it again
                redelivery = client.send(handle.id, "paid", topic="payment", idempotency_key=key)
                group.start_soon(attempt, redelivery)
        assert not failures, f"round {number}: {failures[0]!r}"
        assert (await handle.info()).attempts == 1
        assert await handle.output() == "paid"
