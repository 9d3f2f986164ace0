"""``MemoryStore`` against SQLite in memory and a SQLite file, on the contract suite's
in-process workflows, through ``WorkflowRunner``, in one run.

One round makes a fresh store of each kind and, on it, starts and runs to completion
the same mix of the contract workflows (:mod:`durable_core.contract.workflows`): three
steps, a step/sleep/step (the runner skips the sleep), a receive of a message sent
before it runs, a parent starting three children, and a body publishing events around
a receive. The kinds take turns within each round, their order rotated from round to
round; the figure is the median over rounds of the milliseconds one workflow of the mix
takes, and each store's ratio to ``sqlite:///:memory:`` in the same run.

    python -m bench.memory_store            # 9 rounds of 10 mixes
    python -m bench.memory_store --smoke    # 2 rounds of 2 (every path, no figure kept)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from durable_core import DurableClient, WorkflowConfig, WorkflowHandle, WorkflowStatus
from durable_core.contract import workflows as wfs
from durable_core.seams.store import Store
from durable_core.testing import MemoryStore, WorkflowRunner
from durable_sqlite import SQLiteStore

KINDS = ("memory", "sqlite :memory:", "sqlite file")
WORKFLOWS_PER_MIX = 5 + 3  # five started by the caller, three children


async def _mix(store: Store, runner: WorkflowRunner) -> None:
    """Run one of each workflow of the mix to completion on ``store``."""
    client = DurableClient(store)
    key = uuid.uuid4().hex
    handles: list[WorkflowHandle[Any]] = [
        await client.start_workflow(wfs.three_steps, key),
        await client.start_workflow(wfs.sleeper, key, 3600.0),
        await client.start_workflow(wfs.receiver, key, "t", None),
        await client.start_workflow(wfs.fan_out, key, 3),
        await client.start_workflow(wfs.publisher, key),
    ]
    await client.send(handles[2].id, "m", topic="t")
    await client.send(handles[4].id, "go", topic="go")
    for handle in handles:
        status = await runner.run_until_complete(handle)
        if status is not WorkflowStatus.SUCCEEDED:
            raise RuntimeError(f"{handle.id} ended {status.value}: {(await handle.info()).error}")
    wfs.forget(key)


def _store(kind: str, folder: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite :memory:":
        return SQLiteStore("sqlite:///:memory:")
    return SQLiteStore(f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}")


async def _round(kind: str, mixes: int, folder: Path) -> float:
    """Milliseconds per workflow of ``mixes`` mixes on a fresh store of ``kind``."""
    store = _store(kind, folder)
    await store.open()
    await store.apply_schema()
    try:
        runner = WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0))
        started = time.perf_counter()
        for _ in range(mixes):
            await _mix(store, runner)
        elapsed = time.perf_counter() - started
    finally:
        await store.close()
    return elapsed * 1000 / (mixes * WORKFLOWS_PER_MIX)


async def measure(rounds: int, mixes: int) -> dict[str, list[float]]:
    """Per kind, the milliseconds per workflow of each round."""
    found: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as folder:
        for kind in KINDS:  # a warm-up of each (imports, first statements compiled)
            await _round(kind, 1, Path(folder))
        for n in range(rounds):
            order = KINDS[n % len(KINDS) :] + KINDS[: n % len(KINDS)]
            for kind in order:
                found[kind].append(await _round(kind, mixes, Path(folder)))
    return found


def report(found: dict[str, list[float]], command: str) -> str:
    """The figures as a Markdown table."""
    median: Callable[[list[float]], float] = statistics.median
    base = median(found["sqlite :memory:"])
    file = median(found["sqlite file"])
    lines = [
        f"command: `{command}`",
        "",
        "| store | ms per workflow (median) | / sqlite :memory: | / sqlite file |",
        "| --- | ---: | ---: | ---: |",
    ]
    for kind in KINDS:
        ms = median(found[kind])
        lines.append(f"| {kind} | {ms:.2f} | {ms / base:.2f} | {ms / file:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--mixes", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="2 rounds of 2 mixes")
    args = parser.parse_args()
    rounds, mixes = (2, 2) if args.smoke else (args.rounds, args.mixes)
    found = anyio.run(measure, rounds, mixes)
    command = "python -m bench.memory_store" + (" --smoke" if args.smoke else "")
    print(report(found, command))


if __name__ == "__main__":
    main()
