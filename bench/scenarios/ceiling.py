"""durable-core against what PostgreSQL can commit: the minimal-schema ceiling, in one run.

At concurrency 1, 32 and 128 (in a smoke run: the ceiling alone, at 32), the same
backlog of three-step workflows is drained, in turns whose order rotates from trial to
trial, by:

- ``framework``: a real ``durable_core worker`` on the project's schema;
- ``serial``: the same worker with one flush in flight at a time
  (``WORKFLOW_FLUSHES_IN_FLIGHT=1``; the defaults pipeline two from a concurrency of
  100, :data:`durable_core.runtime.config.PIPELINE_FROM`);
- ``group``: the group-commit floor (:mod:`bench.group_floor`), the same tables;
- ``naive``: the naive floor (:mod:`bench.naive_floor`), one statement per write;
- ``ceiling``: the group-commit floor on the minimal schema (:mod:`bench.ceiling_floor`:
  two tables, the fewest indexes a claim needs), on a database of its own.

durable-core's throughput is reported as ratios against the ceiling and the naive floor
(with issue 20's targets) and against the group floor; beside them its worker CPU and
server CPU per workflow (``/proc`` of the worker and of the server processes serving
it) against the ceiling's, and the writes per flush of each group committer (from the
line each prints when it stops).
"""

from __future__ import annotations

import math
import os
import re
import time

import asyncpg

from bench import ceiling_floor
from bench.common import (
    RESULTS_DIR,
    Figure,
    ScenarioResult,
    Settings,
    ensure_database,
    median,
    plain_dsn,
    reset,
)
from bench.procs import fleet, listeners, server_cpu, wait_listening, wait_settled, worker_backends
from bench.scenarios.e2e import Trial, drain
from durable_core import DurableClient
from durable_core.runtime.config import PIPELINE_FROM
from durable_postgres import PostgresStore

NAME = "ceiling"
TITLE = "Against the minimal-schema ceiling: throughput, worker and server CPU per workflow"

KINDS = ("framework", "serial", "group", "naive", "ceiling")

SERIAL = {"WORKFLOW_FLUSHES_IN_FLIGHT": "1"}
"""The ``serial`` worker's settings (the ``framework`` one has the defaults)."""

TARGETS: dict[tuple[int, str], float] = {
    (32, "ceiling"): 0.5,
    (128, "ceiling"): 0.3,
    (32, "naive"): 3.0,
    (1, "naive"): 0.9,
}
"""Issue 20's targets: (concurrency, compared with) -> least ratio."""

WORKER_CPU_TARGET_US = 150
SERVER_CPU_TARGET_US = 170
"""Issue 20: worker and server CPU per workflow at concurrency 32."""

_FLUSHES = re.compile(r"(\d+) writes in (\d+) flushes")


def writes_per_flush(kind: str) -> float:
    """What the last ``kind`` process (``framework``, ``group``, ``ceiling``) said it wrote
    per flush when it stopped; NaN when it said nothing."""
    log = RESULTS_DIR / "logs" / f"{kind}-0.log"
    found = _FLUSHES.findall(log.read_text(errors="replace")) if log.exists() else []
    if not found:
        return math.nan
    writes, flushes = (int(x) for x in found[-1])
    return writes / flushes if flushes else math.nan


async def drain_ceiling(
    settings: Settings, conn: asyncpg.Connection, *, concurrency: int, count: int
) -> Trial:
    """One ceiling trial on the minimal schema (``conn``: its database), measured as
    :func:`bench.scenarios.e2e.drain` measures the others."""
    await conn.execute(ceiling_floor.SCHEMA)
    bench_sessions = await worker_backends(conn)
    url = ceiling_floor.ceiling_url(settings.url)
    with fleet(url) as group:
        before = await listeners(conn)
        proc = group.start_own_floor("ceiling", concurrency=concurrency)
        await wait_listening(conn, [proc], before + 1)
        cpu_before = proc.cpu_seconds()
        server_before = await server_cpu(conn, bench_sessions)
        await conn.fetchval(ceiling_floor.ENQUEUE, count)
        await wait_settled(conn, [proc], count, timeout=30 if settings.smoke else 180)
        cpu = proc.cpu_seconds() - cpu_before
        server_after = await server_cpu(conn, bench_sessions)
    server = sum(used - server_before.get(pid, 0.0) for pid, used in server_after.items())
    span = await conn.fetchval(
        "SELECT extract(epoch FROM (SELECT max(completed_at) FROM workflows)"
        " - (SELECT min(started_at) FROM workflow_steps))"
    )
    steps = await conn.fetchval("SELECT count(*) FROM workflow_steps WHERE status = 'succeeded'")
    if steps != 3 * count:
        raise RuntimeError(f"ceiling: {steps} succeeded steps for {count} workflows")
    return Trial(
        count / float(span), cpu / count * 1e6, server / count * 1e6 if server_after else math.nan
    )


def _known(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _order(kinds: tuple[str, ...], trial: int) -> list[str]:
    shift = trial % len(kinds)
    order = [*kinds[shift:], *kinds[:shift]]
    return order if trial % 2 == 0 else order[::-1]


def _figures(
    concurrency: int, runs: dict[str, list[Trial]], flushed: dict[str, list[float]]
) -> list[Figure]:
    label = f"concurrency {concurrency}"

    def rates(kind: str) -> list[float]:
        return [t.rate for t in runs[kind]]

    def cpu(kind: str, server: bool = False) -> list[float]:
        return [t.server_cpu_us if server else t.cpu_us for t in runs[kind]]

    per_flush = ", ".join(
        f"{kind} {median(flushed[kind]):.1f}" for kind in ("framework", "group", "ceiling")
    )
    out = []
    for kind, title in (
        ("ceiling", "minimal-schema ceiling"),
        ("naive", "naive floor"),
        ("group", "group-commit floor"),
    ):
        figure = Figure(
            name=f"{label}: durable-core / {title}",
            unit="workflows/s",
            value=median(rates("framework")),
            floor=median(rates(kind)),
            trials=rates("framework"),
            floor_trials=rates(kind),
            note=f"writes per flush: {per_flush}" if kind == "ceiling" else "",
        )
        target = TARGETS.get((concurrency, kind))
        if target is not None:
            figure.target = f">= {target:g}x"
            ratio = figure.ratio
            figure.met = ratio >= target if ratio is not None and _known(ratio) else None
        out.append(figure)
    out.append(
        Figure(
            name=f"{label}: durable-core / one flush at a time",
            unit="workflows/s",
            value=median(rates("framework")),
            floor=median(rates("serial")),
            trials=rates("framework"),
            floor_trials=rates("serial"),
            note="the defaults (two flushes in flight from a concurrency of "
            f"{PIPELINE_FROM}) against one at a time; writes per flush "
            f"{median(flushed['serial']):.1f} one at a time",
        )
    )
    for server, target in ((False, WORKER_CPU_TARGET_US), (True, SERVER_CPU_TARGET_US)):
        value = median(cpu("framework", server))
        figure = Figure(
            name=f"{label}: {'server' if server else 'worker'} CPU per workflow",
            unit="us",
            value=value,
            floor=median(cpu("ceiling", server)),
            better="lower",
            trials=cpu("framework", server),
            floor_trials=cpu("ceiling", server),
            note="floor = the ceiling's; "
            + ("server processes serving the worker" if server else "/proc/PID/stat")
            + f"; group floor {median(cpu('group', server)):.0f} us",
        )
        if concurrency == 32:
            figure.target = f"< {target} us"
            figure.met = value < target if _known(value) else None
        out.append(figure)
    return out


async def run(settings: Settings, result: ScenarioResult) -> None:
    trials = settings.pick(3, 1)
    configs = [
        (1, settings.pick(300, 10)),
        (32, settings.pick(3000, 40)),
        (128, settings.pick(3000, 40)),
    ]
    kinds: tuple[str, ...] = KINDS
    if settings.smoke:
        # Seconds only: the ceiling's own path (the others run in e2e's smoke), figures NaN.
        configs, kinds = [(32, 20)], ("ceiling",)
    ceiling_url = ceiling_floor.ceiling_url(settings.url)
    await ensure_database(ceiling_url)
    conn = await asyncpg.connect(settings.dsn)
    ceiling = await asyncpg.connect(plain_dsn(ceiling_url))
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    try:
        for concurrency, count in configs:
            runs: dict[str, list[Trial]] = {kind: [] for kind in KINDS}
            flushed: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for trial in range(trials):
                for kind in _order(kinds, trial):
                    began = time.perf_counter()
                    if kind == "ceiling":
                        measured = await drain_ceiling(
                            settings, ceiling, concurrency=concurrency, count=count
                        )
                    else:
                        settings_env = SERIAL if kind == "serial" else {}
                        os.environ.update(settings_env)  # the worker process inherits them
                        try:
                            measured = await drain(
                                settings,
                                conn,
                                client,
                                kind="framework" if kind == "serial" else kind,
                                processes=1,
                                concurrency=concurrency,
                                count=count,
                            )
                        finally:
                            for name in settings_env:
                                del os.environ[name]
                    runs[kind].append(measured)
                    log = "framework" if kind == "serial" else kind
                    flushed[kind].append(writes_per_flush(log))
                    print(
                        f"bench: ceiling: c={concurrency} {kind}: {measured.rate:.0f}/s "
                        f"({time.perf_counter() - began:.1f} s)",
                        flush=True,
                    )
            for figure in _figures(concurrency, runs, flushed):
                result.add(figure)
            result.details[f"concurrency {concurrency}"] = {
                "count": count,
                "trials": {kind: [t._asdict() for t in runs[kind]] for kind in KINDS},
                "writes_per_flush": flushed,
            }
    finally:
        await reset(conn)
        await store.close()
        await ceiling.close()
        await conn.close()
