"""The worker's Python per workflow, counted in instructions by callgrind.

``python -m bench.profile_inprocess [--url URL] [--concurrency 32] [--small 100]
[--large 300]`` enqueues ``--small`` three-step workflows, then drains them with a
real :class:`~durable_core.runtime.worker.WorkflowWorker` on a real PostgreSQL store,
in a process run under ``valgrind --tool=callgrind``; then the same with ``--large``.
The difference of the two processes' instruction counts over the difference of
their sizes is the worker's instructions per workflow (start-up and imports cancel
out). Instruction counts do not depend on what else the machine runs, so they
compare one build of the worker with another where times on a loaded machine
cannot. The database's work is in its own processes and is not counted. The large
run's profile is kept in ``bench/results/callgrind-c<N>.out`` (``callgrind_annotate``
reads it). Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

import anyio
import asyncpg

from bench import DEFAULT_URL, app
from bench.common import DEV_PLUGINS, RESULTS_DIR, Settings, ensure_database, prepare_schema, reset
from durable_core import DurableClient, WorkflowConfig
from durable_core.runtime.worker import WorkflowWorker, freeze_start_up
from durable_core.seams.records import Settlement, StepWrite
from durable_postgres import PostgresStore


class _DrainingStore(PostgresStore):
    """The PostgreSQL store, stopping its worker once ``total`` settlements landed."""

    def __init__(self, url: str, total: int) -> None:
        super().__init__(url)
        self.left = total
        self.worker: WorkflowWorker | None = None

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        landed = await super().write_batch(steps, settlements)
        self.left -= sum(landed[1])
        if self.left <= 0 and self.worker is not None:
            self.worker.stop()
        return landed


async def _drain(url: str, total: int, concurrency: int) -> None:
    """Drain ``total`` enqueued workflows in this process (the part callgrind counts)."""
    assert app.three_steps is not None  # the workflows are registered
    store = _DrainingStore(url, total)
    await store.open()
    try:
        worker = WorkflowWorker(store, WorkflowConfig(concurrency=concurrency))
        store.worker = worker
        freeze_start_up()  # as ``durable worker`` does
        await worker.run()
    finally:
        await store.close()


async def _enqueue(url: str, total: int) -> None:
    settings = Settings(url=url, smoke=False)
    await ensure_database(settings.url)
    await prepare_schema(settings.url)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    try:
        await reset(conn)
        await DurableClient(store).start_workflows(app.three_steps, [(i,) for i in range(total)])
    finally:
        await store.close()
        await conn.close()


def instructions(url: str, total: int, concurrency: int, out: str) -> int:
    """The instructions of a process draining ``total`` workflows, by callgrind."""
    anyio.run(_enqueue, url, total)
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "bench.profile_inprocess",
        "--drain",
        str(total),
        "--concurrency",
        str(concurrency),
        "--url",
        url,
    ]
    # The dev environment's plugins are left out, as in the bench's worker processes.
    env = {**os.environ, "DURABLE_BLOCK_PLUGINS": DEV_PLUGINS}
    subprocess.run(
        command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    with open(out) as profile:
        for line in profile:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{out}: no instruction total")


def main(argv: list[str] | None = None) -> int:
    """Count the worker's instructions per workflow; print them."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile_inprocess")
    parser.add_argument("--url", default=os.environ.get("DURABLE_BENCH_URL", DEFAULT_URL))
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=300)
    parser.add_argument("--drain", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drain is not None:
        anyio.run(_drain, args.url, args.drain, args.concurrency)
        return 0
    if shutil.which("valgrind") is None:
        print("bench.profile_inprocess: valgrind is not installed")
        return 2
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    kept = str(RESULTS_DIR / f"callgrind-c{args.concurrency}.out")
    small = instructions(args.url, args.small, args.concurrency, kept + ".small")
    large = instructions(args.url, args.large, args.concurrency, kept)
    os.unlink(kept + ".small")
    per = (large - small) / (args.large - args.small)
    print(
        f"worker (concurrency {args.concurrency}): {per / 1e6:.3f} M instructions per "
        f"three-step workflow ({args.small}: {small:,}; {args.large}: {large:,}); "
        f"profile: {kept}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
