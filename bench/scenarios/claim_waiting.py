"""Claim cost with and without 100,000 waiting workflows in the table.

The table first gets settled history (succeeded workflows, three steps each),
as in the ``claim`` scenario. Then rounds alternate two states: no waiting
rows, and 100,000 of them (:mod:`bench.waiting_rows`: half sleeping until one
to two days from now, half in ``recv`` with no deadline, two step rows each),
inserted and deleted between states, with ``VACUUM ANALYZE`` after every
change. In each state the store's claim statement is timed, each run inside a
transaction that is rolled back, in two situations:

- a backlog of 1,000 due pending rows, claims of 1 and of 32 rows: the scans
  for expired leases and due rows fill the limit, the scan for woken waiting
  rows never runs;
- an empty queue, a claim of 32 that returns nothing: what an idle worker
  sends on every ``NOTIFY`` and poll, where all three scans run, including
  the one over waiting rows (``status = 'waiting' AND run_at <= now()``).

The figure is the median with waiting rows; the floor is the median without,
from the same rounds; the target bounds the ratio. Each case runs on a fresh
prepared statement, under the store's own connection settings (``plan_cache_mode =
force_generic_plan``: each statement is planned once). The other rows run the same
claims under PostgreSQL's default plan cache (``auto``, the store's setting before; a
URL's ``?plan_cache_mode=auto`` chooses it), which, with this many rows waiting, plans
every claim anew (``pg_prepared_statements`` counts the custom plans).
"""

from __future__ import annotations

import time

import asyncpg

from bench import sql
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.floor import claim_args
from bench.scenarios.claim import (
    _HISTORY,
    _HISTORY_STEPS,
    _PENDING,
    _round_trips,
    timed_claims,
)
from bench.waiting_rows import add_waiting, count_waiting, drop_waiting, settle_tables

NAME = "claim_waiting"
TITLE = "Claim cost with 100,000 workflows waiting (ms per claim statement)"

TARGET_RATIO = 1.05
BACKLOG = 1_000
MODES = {"auto": "auto", "generic": "force_generic_plan"}
CASES = ("backlog 1", "backlog 32", "idle 32")


async def _claims(
    conn: asyncpg.Connection, limit: int, expected: int, iterations: int
) -> tuple[list[float], int, int]:
    """Milliseconds per claim statement, each run in a transaction rolled back; and how
    many generic and custom plans the server used for them."""
    times, claim = await timed_claims(conn, limit, expected, iterations)
    plans = await conn.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1",
        claim.get_name(),
    )
    return times, int(plans["generic_plans"]), int(plans["custom_plans"])


async def _explain(conn: asyncpg.Connection, limit: int) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of one claim, rolled back."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        rows = await conn.fetch(
            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + sql.CLAIM.sql,
            *claim_args("bench:explain", limit),
        )
    finally:
        await transaction.rollback()
    return "\n".join(row[0] for row in rows)


class _State:
    """What one state (with or without waiting rows) measured over all rounds."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.rounds: dict[str, list[float]] = {}
        self.plans: dict[str, list[int]] = {}
        self.explain: dict[str, str] = {}

    def add(self, key: str, measured: tuple[list[float], int, int]) -> None:
        times, generic, custom = measured
        self.times.setdefault(key, []).extend(times)
        self.rounds.setdefault(key, []).append(median(times))
        counts = self.plans.setdefault(key, [0, 0])
        counts[0] += generic
        counts[1] += custom

    def custom(self, key: str) -> str:
        generic, custom = self.plans[key]
        return f"{custom}/{generic + custom}"


async def _measure(conn: asyncpg.Connection, iterations: int, state: _State) -> None:
    """Time every case once in the current state."""

    async def cases(limits: tuple[int, ...], prefix: str) -> None:
        # A backlog fills every claim; an empty queue returns nothing.
        for mode, setting in MODES.items():
            await conn.execute(f"SET plan_cache_mode = {setting}")
            try:
                for limit in limits:
                    expected = limit if prefix == "backlog" else 0
                    measured = await _claims(conn, limit, expected, iterations)
                    state.add(f"{mode} {prefix} {limit}", measured)
            finally:
                await conn.execute("RESET plan_cache_mode")

    await conn.execute(_PENDING, 0, BACKLOG)
    await settle_tables(conn)
    await _claims(conn, 1, 1, 5)  # warm the buffers
    await cases((1, 32), "backlog")
    state.explain["backlog 32"] = await _explain(conn, 32)
    await conn.execute("DELETE FROM workflows WHERE status = 'pending'")
    await settle_tables(conn)
    await cases((32,), "idle")
    state.explain["idle 32"] = await _explain(conn, 32)
    state.add("select 1", (await _round_trips(conn, iterations), 0, 0))


async def run(settings: Settings, result: ScenarioResult) -> None:
    history = settings.pick(100_000, 2_000)
    waiting = settings.pick(100_000, 1_000)
    rounds = settings.pick(3, 1)
    iterations = settings.pick(300, 20)
    without, present = _State(), _State()
    conn = await asyncpg.connect(settings.dsn, server_settings=sql.SERVER_SETTINGS)
    try:
        await reset(conn)
        await conn.execute(_HISTORY, history)
        await conn.execute(_HISTORY_STEPS)
        started = time.perf_counter()
        for _ in range(rounds):
            await _measure(conn, iterations, without)
            await add_waiting(conn, waiting)
            await _measure(conn, iterations, present)
            if await count_waiting(conn) != waiting:
                raise RuntimeError(f"expected {waiting} waiting rows")
            await drop_waiting(conn)
            await settle_tables(conn)
        result.details["measure_seconds"] = time.perf_counter() - started
    finally:
        await reset(conn)
        await conn.close()
    labels = {
        "backlog 1": f"claim 1 row, {BACKLOG:,} pending",
        "backlog 32": f"claim 32 rows, {BACKLOG:,} pending",
        "idle 32": "claim of 32 on an empty queue (idle worker)",
    }
    rows = [("generic", case) for case in CASES] + [("auto", "backlog 32"), ("auto", "idle 32")]
    round_trip = (
        f"SELECT 1 {median(without.times['select 1']):.3f} / "
        f"{median(present.times['select 1']):.3f} ms"
    )
    for mode, case in rows:
        key = f"{mode} {case}"
        figure = Figure(
            name=f"{labels[case]}, {waiting:,} waiting",
            unit="ms",
            value=median(present.times[key]),
            floor=median(without.times[key]),
            better="lower",
            trials=present.rounds[key],
            floor_trials=without.rounds[key],
        )
        if mode == "generic":
            figure.target = f"<= {TARGET_RATIO:g}x without"
            figure.met = (figure.ratio or 0) <= TARGET_RATIO
            figure.note = (
                f"floor = same claim without waiting rows, same rounds ({rounds} x "
                f"{iterations}); plan_cache_mode = force_generic_plan; "
                f"{round_trip}; {history:,} settled rows beside"
            )
        else:
            figure.name += ", PostgreSQL's default plan cache (auto)"
            figure.note = (
                f"plan_cache_mode = auto: custom plans {present.custom(key)} with, "
                f"{without.custom(key)} without"
            )
        result.add(figure)
    result.details.update(
        {
            "history_rows": history,
            "waiting_rows": waiting,
            "median_ms": {
                name: {key: median(values) for key, values in state.times.items()}
                for name, state in (("without", without), ("with", present))
            },
            "plans_generic_custom": {"without": without.plans, "with": present.plans},
            "explain_with_waiting": present.explain,
            "explain_without": without.explain,
        }
    )
