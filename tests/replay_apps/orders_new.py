"""The "new code" ``durable replay-check --app`` gets in tests/test_replay_check.py: the
orders workflow with its charge step renamed (a change that breaks the histories in
flight), the greeting workflow unchanged."""

from __future__ import annotations

from durable_core import recv, workflow, workflow_step


@workflow_step(name="orders.reserve")
async def reserve(item: str) -> str:
    return f"reserved {item}"


@workflow_step(name="orders.charge_card")
async def charge_card(item: str) -> str:
    return f"charged {item}"


@workflow(name="orders.place")
async def place(item: str) -> str:
    await reserve(item)
    await charge_card(item)
    return str(await recv("shipped"))


@workflow_step(name="greet.hello")
async def hello(name: str) -> str:
    return f"hello {name}"


@workflow(name="greet.wait")
async def greet(name: str) -> str:
    said = await hello(name)
    return f"{said}, {await recv('reply')}"
