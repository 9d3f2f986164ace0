"""One module per measurement; each exposes ``NAME``, ``TITLE`` and ``async run(settings)``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import ModuleType

from bench.common import ScenarioResult, Settings
from bench.scenarios import (
    attributes,
    ceiling,
    claim,
    claim_waiting,
    dashboard,
    e2e,
    e2e_waiting,
    enqueue,
    gather,
    latency,
    liveness,
    memory,
    memory_waiting,
    plans,
    pooler,
    processes,
    retention,
    steps,
    streams,
    updates,
    wake,
)

Runner = Callable[[Settings, ScenarioResult], Awaitable[None]]

ALL: tuple[ModuleType, ...] = (
    enqueue,
    e2e,
    e2e_waiting,
    processes,
    ceiling,
    plans,
    latency,
    wake,
    gather,
    streams,
    updates,
    attributes,
    claim,
    claim_waiting,
    retention,
    liveness,
    pooler,
    steps,
    memory,
    memory_waiting,
    dashboard,
)
"""In the order a full run measures them (the slow, table-filling claim test late)."""

BY_NAME: dict[str, ModuleType] = {module.NAME: module for module in ALL}
