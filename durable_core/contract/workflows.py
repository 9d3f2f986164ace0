"""Workflows the contract suite drives through the real executor.

They live at module level so they register under importable names
(``durable_core.contract.workflows.<name>``). Each run is told apart by a
``key`` argument; the module-level dictionaries below are keyed by it, so a
test steers one run (how often a step fails, which branch a body takes) and
reads back which step bodies really ran.
"""

from __future__ import annotations

from collections import defaultdict

from ..caller.client import start_workflows
from ..definitions.registry import workflow
from ..primitives.steps import workflow_step
from ..primitives.waiting import recv, set_event, sleep

CALLS: defaultdict[str, list[str]] = defaultdict(list)
"""Step bodies that ran, in order, per key (a replayed step adds nothing)."""

FAILURES: defaultdict[str, int] = defaultdict(int)
"""How many more times ``step_two`` raises for a key before it succeeds."""

NONCE: dict[str, str] = {}
"""The input ``drifting`` passes to its first step, per key (change it to break replay)."""

BRANCH: dict[str, bool] = {}
"""Which first step ``branching`` calls, per key (flip it to break replay)."""


class PlannedFailure(RuntimeError):
    """What ``step_two`` raises while ``FAILURES[key]`` is positive."""


@workflow_step
async def step_one(key: str) -> str:
    """Return ``"<key>:1"``."""
    CALLS[key].append("one")
    return f"{key}:1"


@workflow_step
async def step_two(key: str, previous: str) -> str:
    """Raise :class:`PlannedFailure` while failures are planned, else extend ``previous``."""
    CALLS[key].append("two")
    if FAILURES[key] > 0:
        FAILURES[key] -= 1
        raise PlannedFailure(f"planned failure of step_two for {key}")
    return f"{previous}:2"


@workflow_step
def step_three(key: str, previous: str) -> str:
    """A plain ``def`` step (runs in a worker thread)."""
    CALLS[key].append("three")
    return f"{previous}:3"


@workflow_step
async def echo_value(key: str, value: object) -> object:
    """Return ``value`` unchanged."""
    CALLS[key].append("echo")
    return value


@workflow_step
async def step_a(key: str) -> str:
    """One of the two first steps of ``branching``."""
    CALLS[key].append("a")
    return "a"


@workflow_step
async def step_b(key: str) -> str:
    """The other first step of ``branching``."""
    CALLS[key].append("b")
    return "b"


@workflow
async def three_steps(key: str) -> list[str]:
    """Three steps in a row; ``step_two`` fails ``FAILURES[key]`` times first."""
    one = await step_one(key)
    two = await step_two(key, one)
    three = await step_three(key, two)
    return [one, two, three]


@workflow
async def drifting(key: str) -> str:
    """Passes ``NONCE[key]`` to its first step: changing it between attempts breaks replay."""
    await echo_value(key, NONCE[key])
    return await step_two(key, "drift")


@workflow
async def branching(key: str) -> str:
    """Calls a different first step depending on ``BRANCH[key]``."""
    first = await (step_a(key) if BRANCH[key] else step_b(key))
    return await step_two(key, first)


@workflow
async def echo(key: str, value: object) -> object:
    """Returns ``value`` after it went through a step and the step cache."""
    result = await echo_value(key, value)
    await step_two(key, "echo")
    return result


@workflow
async def sleeper(key: str, seconds: float) -> str:
    """A step, a durable sleep, a step."""
    one = await step_one(key)
    await sleep(seconds)
    return await step_two(key, one)


@workflow
async def receiver(key: str, topic: str, timeout: float | None) -> object:
    """Receives one message on ``topic`` (``None`` after ``timeout``), through a step."""
    message = await recv(topic, timeout=timeout)
    return await echo_value(key, message)


@workflow
async def doubled(key: str, n: int) -> int:
    """A child: ``2 * n`` through a step."""
    value = await echo_value(key, n * 2)
    assert isinstance(value, int)
    return value


@workflow
async def fan_out(key: str, n: int) -> int:
    """Starts ``n`` children from its body and sums their outputs."""
    children = await start_workflows(doubled, [(key, i) for i in range(n)])
    total = 0
    for child in children:
        total += await child.output()
    return total


@workflow
async def publisher(key: str) -> str:
    """Publishes ``stage`` = 1, waits for a message, publishes ``stage`` = 2."""
    await set_event("stage", 1)
    message = await recv("go")
    await set_event("stage", 2)
    return str(message)


def forget(key: str) -> None:
    """Drop the state kept for ``key``."""
    for table in (CALLS, FAILURES, NONCE, BRANCH):
        table.pop(key, None)
