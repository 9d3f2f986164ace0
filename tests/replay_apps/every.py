"""A workflow that makes every kind of call the door journals (steps, a sleep, messages,
a child and its end, an event, a stream, attributes, an update and its reply, a
debounced start, a saga that compensates, ``now``, ``random``, a patch, branches),
defined by :func:`define` into a registry: the replay check must replay its history
through the same code without touching the store, and report a step inserted without a
patch. ``every_same`` and ``every_inserted`` define it into the default registry for
``durable replay-check --app``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import anyio

from durable_core import (
    CompensatedError,
    DebounceKey,
    DurableClient,
    Registry,
    Workflow,
    close_stream,
    current_store,
    now,
    patched,
    random,
    recv,
    recv_update,
    saga,
    send,
    set_attributes,
    set_event,
    sleep,
    start_workflow,
    workflow,
    workflow_step,
    write_stream,
)


@workflow_step(name="every.note")
async def note(what: str) -> str:
    return what


@workflow_step(name="every.release")
async def release(what: str) -> None:
    return None


@dataclass(frozen=True)
class Every:
    """The workflows :func:`define` registered."""

    every: Workflow[[str], str]
    child: Workflow[[str], str]
    debounced: Workflow[[str], str]


def define(registry: Registry | None, *, inserted: bool) -> Every:
    """Register ``every.flow`` (with a step inserted at its start when ``inserted``, as a
    change made without a patch would) and the workflows it starts into ``registry``."""

    @workflow(name="every.child", registry=registry)
    async def child(item: str) -> str:
        greeting = await recv("greet")
        return f"{item}: {greeting}"

    @workflow(name="every.debounced", registry=registry)
    async def debounced(item: str) -> str:
        return await note(f"debounced {item}")

    @workflow(name="every.flow", registry=registry)
    async def every(item: str) -> str:
        if inserted:
            await note("inserted")
        said = [await note("first")]
        await set_attributes(item=item)
        await write_stream("progress", "one")
        await set_event("ready", item)
        said.append((await now()).isoformat()[:4])
        said.append(str(0 <= await random() < 1))
        if await patched("greeting"):
            said.append(await note("patched"))
        kid = await start_workflow(child, item)
        await send(kid.id, "hello", topic="greet")
        said.append(await kid.output())
        await DurableClient(current_store()).start_workflow_debounced(
            DebounceKey(item, seconds=60), debounced, item
        )
        try:
            async with saga() as undo:
                await undo.compensate(release, await note("reserve"))
                raise RuntimeError("declined")
        except CompensatedError:
            said.append("compensated")
        request = await recv_update("ask")
        assert request is not None
        await request.reply(f"answer to {request.payload}")
        await close_stream("progress")
        branches: list[str] = []

        async def branch(n: int) -> None:
            branches.append(await note(f"branch {n}"))
            await sleep(1)
            branches.append(await note(f"branch {n} again"))

        async with anyio.create_task_group() as group:
            for n in range(2):
                group.start_soon(branch, n)
        said.extend(sorted(branches))
        said.extend(await asyncio.gather(note("left"), note("right")))
        said.append(str(await recv("finish")))
        return ", ".join(said)

    return Every(every, child, debounced)
