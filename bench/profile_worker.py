"""Where a real worker's CPU goes: py-spy sampling a worker draining three-step workflows.

``python -m bench.profile_worker [--url URL] [--concurrency 32] [--count 5000]
[--uvloop]`` empties the tables, starts ``python -m durable_core worker --app
bench.app`` (through :mod:`bench.uvloop_run` with ``--uvloop``), attaches
``py-spy record --nonblocking`` once it listens, enqueues the backlog in one
statement, waits until it has drained and prints: worker CPU per workflow (from
``/proc``), where it goes by kind (socket sends, the rest of asyncpg, the event
loop, the framework's parts) and the costs outside asyncpg by function (self time). The raw
collapsed stacks are kept in ``bench/results/profile-*.txt``. Needs ``py-spy``
(``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import anyio
import asyncpg

from bench import DEFAULT_URL, app
from bench.common import RESULTS_DIR, Settings, ensure_database, prepare_schema, reset
from bench.procs import fleet, listeners, wait_listening, wait_settled
from durable_core import DurableClient
from durable_postgres import PostgresStore

FRAMEWORK = ("durable_core/", "durable_postgres/")
EPOLL = "EpollSelector.select (selectors.py)"


@dataclass
class Profile:
    """Collapsed stacks: ``frames`` (outermost first) -> samples."""

    stacks: Counter[tuple[str, ...]]
    rate: int

    @classmethod
    def read(cls, path: Path, rate: int) -> Profile:
        stacks: Counter[tuple[str, ...]] = Counter()
        for line in path.read_text().splitlines():
            frames, _, count = line.rpartition(" ")
            if frames:
                stacks[tuple(frames.split(";"))] += int(count)
        return cls(stacks, rate)

    @property
    def total(self) -> int:
        return sum(self.stacks.values())

    def split(self) -> tuple[int, Counter[str], Counter[str]]:
        """Samples waiting in epoll; the others by kind (:func:`_kind`) and, outside
        asyncpg, by leaf function (self time)."""
        waiting = 0
        kinds: Counter[str] = Counter()
        leaf: Counter[str] = Counter()
        for frames, count in self.stacks.items():
            if _short(frames[-1]) == EPOLL:
                waiting += count
                continue
            kind = _kind(frames)
            kinds[kind] += count
            if not kind.startswith("asyncpg"):
                leaf[_short(frames[-1])] += count
        return waiting, kinds, leaf


def _kind(frames: tuple[str, ...]) -> str:
    """What a sample was doing, from its stack (outermost frame first)."""
    if any("asyncpg/" in frame for frame in frames):
        if "_SelectorSocketTransport.write" in frames[-1]:
            return "asyncpg: socket send (the kernel's loopback TCP)"
        return "asyncpg: pool, execute, protocol"
    mine = [frame for frame in frames if any(part in frame for part in FRAMEWORK)]
    deepest = mine[-1] if mine else ""
    if any("durable_example_store" in f or "pluggy/" in f for f in frames) or (
        "hooks.py" in deepest
    ):
        return "hooks: pluggy and observers (in dev: the test plugin's)"
    if deepest.startswith("_main (") and "durable_core/cli" in deepest:
        # The command's ``anyio.run``: the event loop's own work, under no coroutine.
        return "event loop: callbacks, socket reads, task wake-ups"
    for part, kind in _FRAMEWORK_KINDS:
        if part in deepest:
            return kind
    return "framework: worker, executor, anyio, the rest"


_FRAMEWORK_KINDS = (
    ("codec/", "framework: JSON encoding and decoding"),
    ("/sql/", "framework: store wrappers (SQLStore, connector)"),
    ("durable_postgres/", "framework: store wrappers (SQLStore, connector)"),
    ("steps.py", "framework: steps and attempt bookkeeping"),
    ("attempt.py", "framework: steps and attempt bookkeeping"),
    ("context.py", "framework: steps and attempt bookkeeping"),
)


def _short(frame: str) -> str:
    """``function (path/to/module.py:12)`` -> ``function (module.py)``."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"


async def _run(args: argparse.Namespace, out: Path) -> tuple[float, float]:
    """Drain ``args.count`` workflows under py-spy; (worker CPU us per workflow, seconds)."""
    settings = Settings(url=args.url, smoke=False)
    await ensure_database(settings.url)
    await prepare_schema(settings.url)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        await reset(conn)
        with fleet(settings.url) as group:
            before = await listeners(conn)
            proc = group.start_worker(concurrency=args.concurrency, uvloop=args.uvloop)
            await wait_listening(conn, [proc], before + 1)
            spy = subprocess.Popen(
                [
                    args.py_spy,
                    "record",
                    "--pid",
                    str(proc.pid),
                    "--nonblocking",
                    "--rate",
                    str(args.rate),
                    "--format",
                    "raw",
                    "--output",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                await anyio.sleep(1.0)  # py-spy attached and sampling
                cpu_before = proc.cpu_seconds()
                started = time.perf_counter()
                await client.start_workflows(app.three_steps, [(i,) for i in range(args.count)])
                await wait_settled(conn, [proc], args.count, timeout=600)
                seconds = time.perf_counter() - started
                cpu = proc.cpu_seconds() - cpu_before
            finally:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
    finally:
        await store.close()
        await conn.close()
    return cpu / args.count * 1e6, seconds


def main(argv: list[str] | None = None) -> int:
    """Profile a worker; print the summary."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile_worker")
    parser.add_argument("--url", default=os.environ.get("DURABLE_BENCH_URL", DEFAULT_URL))
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--uvloop", action="store_true", help="run the worker on uvloop")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    args.py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(args.py_spy).exists():
        print("bench.profile_worker: py-spy is not installed (pip install py-spy)")
        return 2
    loop = "uvloop" if args.uvloop else "asyncio"
    out = RESULTS_DIR / f"profile-c{args.concurrency}-{loop}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    cpu_us, seconds = anyio.run(_run, args, out)
    profile = Profile.read(out, args.rate)
    # Samples waiting in epoll are mostly the loop idling (py-spy cannot tell them from the
    # syscall's own work); the shares below are of the other samples, each turned into
    # microseconds with the worker's CPU from /proc.
    waiting, kinds, leaf = profile.split()
    busy = profile.total - waiting

    def us(samples: int) -> float:
        return samples / busy * cpu_us

    print(
        f"worker ({loop}, concurrency {args.concurrency}): {args.count} workflows in "
        f"{seconds:.1f} s; CPU {cpu_us:.0f} us per workflow (/proc); {profile.total} samples, "
        f"{waiting} of them waiting in epoll (left out)"
    )
    print("by kind:")
    for name, samples in kinds.most_common():
        print(f"  {samples / busy:6.1%} {us(samples):6.1f} us  {name}")
    print("outside asyncpg, by function (self time):")
    for name, samples in leaf.most_common(args.top):
        print(f"  {samples / busy:6.1%} {us(samples):6.1f} us  {name}")
    print(f"stacks: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
