"""A workflow whose every payload holds personal data: its input, step inputs and outputs,
a failed try's error, an event, stream items, a message, an update and its reply, a
child's input and output, searchable attributes, and (when refused) its own error. The
encryption and erasure tests look for that data in every table."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

import anyio

from durable_core import (
    DurableClient,
    RetryPolicy,
    WorkflowStatus,
    close_stream,
    recv,
    recv_update,
    set_attributes,
    set_event,
    start_workflow,
    workflow,
    workflow_step,
    write_stream,
)
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    born: date


def person(name: str) -> Person:
    """A person whose name and e-mail are what the tests look for."""
    return Person(name, f"{name.lower().replace(' ', '.')}@example.org", date(1906, 12, 9))


def secrets_of(who: Person) -> list[str]:
    """The texts of ``who`` that no table may hold in clear."""
    return [who.name, who.email, who.name.split()[-1]]


CHECKED: set[str] = set()


@workflow_step(retry=RetryPolicy(max_attempts=3, initial_interval=0))
async def check(who: Person) -> str:
    """Fails its first try (a try's error naming the person), then passes."""
    if who.email not in CHECKED:
        CHECKED.add(who.email)
        raise LookupError(f"{who.name} <{who.email}> is not in the registry yet")
    return f"{who.name} checked"


@workflow_step
async def greet(who: Person) -> str:
    return f"Dear {who.name}"


@workflow(name="private.child")
async def child_letter(who: Person) -> str:
    return await greet(who)


@workflow(name="private.enrol", max_attempts=1)
async def enrol(who: Person) -> dict[str, Any]:
    await set_attributes(customer=who.email)
    letter = await greet(who)
    await check(who)
    await set_event("letter", letter)
    await write_stream("log", f"greeted {who.name}")
    await close_stream("log")
    child = await start_workflow(child_letter, who)
    note = await recv("approval", timeout=3600)
    request = await recv_update("confirm", timeout=3600)
    assert request is not None
    await request.reply(f"confirmed for {who.name}")
    if note == "refuse":
        raise PermissionError(f"{who.name} <{who.email}> was refused")
    return {"letter": letter, "note": note, "child": await child.output()}


async def run_enrolment(store: Store, who: Person, note: str) -> tuple[str, WorkflowStatus]:
    """Start ``enrol(who)``, send it ``note`` and its update, run it and its child to their
    ends; its id and status, and the update's reply checked."""
    client, runner = DurableClient(store), WorkflowRunner(store)
    handle = await client.start_workflow(enrol, who)
    await client.send(handle.id, note, topic="approval")
    replies: list[Any] = []

    async def confirm() -> None:
        replies.append(await client.update(handle.id, "confirm", {"by": who.name}, timeout=600))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(confirm)
        with anyio.fail_after(600):  # a hang guard, not a bound
            while not await _update_sent(store, handle.id):  # noqa: ASYNC110 - a row, polled
                await anyio.sleep(0.02)
        status = await runner.run_until_complete(handle)
    assert replies == [f"confirmed for {who.name}"]
    for child in await client.list_workflows(parent_id=handle.id):  # a refused one's too
        assert await runner.run_until_complete(child.id) is WorkflowStatus.SUCCEEDED
    return handle.id, status


async def _update_sent(store: Store, workflow_id: str) -> bool:
    from durable_core.seams.talk_roles import updates_of

    return await updates_of(store).next_update(workflow_id, "confirm") is not None
