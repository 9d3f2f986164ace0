"""Per-step overhead, in-process: a persisted step against a bare call and two bare round trips,
and a transaction step against a plain step and bare asyncpg doing the same INSERT.

A workflow calling the same trivial step many times runs through the real
``Executor``; the body times each step call. On PostgreSQL the floor is the
step's two statements (``start_step`` + ``complete_step``) sent by bare
asyncpg under a real lease. With a store that does nothing the figure is the
framework's own CPU per step; a replay from cache shows the cached-step path.

Each of those three is measured again with the encrypting codec (AES-GCM) writing every
step's input and output, in the same rounds, interleaved with the plain JSON runs: the
encrypted figure's floor is the same step with the JSON codec.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio.lowlevel
import asyncpg

from bench import app, sql, tx_steps
from bench.common import Figure, ScenarioResult, Settings, median, reset
from bench.floor import LEASE_SECONDS, STEP_INPUT, STEP_OUTPUT, claim_args, enqueue_args
from durable_core import DurableClient, Executor, WorkflowConfig
from durable_core.codec import EncryptingCodec, encode, encode_arguments, register_codec, use_codec
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.records import ClaimedWorkflow, Lease, Settlement, StepRecord, StepStatus
from durable_core.seams.roles import ROLES, lacking
from durable_postgres import PostgresStore

NAME = "steps"
TITLE = "Per-step overhead, in-process (microseconds per step)"


class NullStore:
    """A store whose execution-side writes return at once: the framework's CPU alone."""

    description = "null store"

    async def check_schema(self) -> None:
        pass

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        pass

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        pass

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        pass

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        pass

    async def settle(self, settlement: Settlement) -> None:
        pass

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        return []


def _unused(name: str) -> Any:
    async def unused(self: object, *args: object, **kwargs: object) -> Any:
        raise NotImplementedError(f"the null store's {name}() is never called by this bench")

    return unused


# The worker asks for every role at boot; what this bench never calls fails if called.
for _role in ROLES:
    for _name in lacking(NullStore(), _role):
        setattr(NullStore, _name, _unused(_name))


class NullClaimStore(NullStore):
    """Hands out ``total`` three-step workflows at once; every operation yields once, like I/O."""

    def __init__(self, total: int) -> None:
        self.left = total
        self.input = encode_arguments((1,), {}, what="input")
        self.worker: WorkflowWorker | None = None

    async def claim(
        self, *, worker_id: str, limit: int, lease_seconds: float, routes: Any = None
    ) -> list[ClaimedWorkflow]:
        count = min(limit, self.left)
        self.left -= count
        await anyio.lowlevel.checkpoint()
        return [
            ClaimedWorkflow(
                id=f"null-{self.left + i}",
                name="bench.app.three_steps",
                input=self.input,
                attempts=1,
                max_attempts=3,
                lease=Lease(f"null-{self.left + i}", "token", worker_id),
                steps=(),
            )
            for i in range(count)
        ]

    async def due_schedules(self, now: Any, *, limit: int = 100) -> list[Any]:
        return []

    async def next_schedule_tick(self) -> None:
        return None

    async def wait_for_work(self, timeout: float) -> None:
        if self.left == 0 and self.worker is not None:
            self.worker.stop()
        await anyio.lowlevel.checkpoint()

    async def start_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, *, path: str | None = None
    ) -> None:
        await anyio.lowlevel.checkpoint()

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        await anyio.lowlevel.checkpoint()

    async def settle(self, settlement: Settlement) -> None:
        await anyio.lowlevel.checkpoint()


async def _worker_cpu_us(total: int, concurrency: int) -> float:
    """Process CPU per workflow of a real ``WorkflowWorker`` draining a :class:`NullClaimStore`."""
    store = NullClaimStore(total)
    worker = WorkflowWorker(store, WorkflowConfig(concurrency=concurrency))  # type: ignore[arg-type]
    store.worker = worker
    started = time.process_time()
    await worker.run()
    return (time.process_time() - started) / total * 1e6


def _claimed(count: int, cached: bool) -> ClaimedWorkflow:
    steps: tuple[StepRecord, ...] = ()
    if cached:
        steps = tuple(
            StepRecord(
                i,
                "bench.app.add_one",
                StepStatus.SUCCEEDED,
                encode_arguments((i,), {}, what="input"),
                encode(i + 1),
            )
            for i in range(count)
        )
    return ClaimedWorkflow(
        id="bench-null",
        name="bench.app.many_steps",
        input=encode_arguments((count,), {}, what="input"),
        attempts=1,
        max_attempts=3,
        lease=Lease("bench-null", "token", "bench"),
        steps=steps,
    )


async def _framework_steps(executor: Executor, claimed: ClaimedWorkflow) -> list[float]:
    app.step_times.clear()
    await executor.run(claimed)
    return [t * 1e6 for t in app.step_times]


async def _postgres_steps(store: PostgresStore, client: DurableClient, count: int) -> list[float]:
    handle = await client.start_workflow(app.many_steps, count)
    claimed = await store.acquire(handle.id, worker_id="bench", lease_seconds=LEASE_SECONDS)
    assert claimed is not None
    return await _framework_steps(Executor(store, WorkflowConfig()), claimed)


async def _floor_steps(pool: asyncpg.Pool, count: int) -> list[float]:
    await pool.fetch(sql.ENQUEUE.sql, *enqueue_args(1, "bench.app.many_steps"))
    row = (await pool.fetch(sql.CLAIM.sql, *claim_args("bench:floor", 1)))[0]
    lease = {"workflow": row[0], "token": row[5]}
    times = []
    clock = time.perf_counter
    for index in range(count):
        started = clock()
        start = sql.positional(
            sql.START_STEP,
            **lease,
            index=index,
            step_name="bench.app.add_one",
            input=STEP_INPUT,
            path=None,
        )
        assert not (await pool.execute(sql.START_STEP.sql, *start)).endswith(" 0")
        done = sql.positional(sql.COMPLETE_STEP, **lease, index=index, output_json=STEP_OUTPUT)
        assert not (await pool.execute(sql.COMPLETE_STEP.sql, *done)).endswith(" 0")
        times.append((clock() - started) * 1e6)
    settle = sql.positional(
        sql.SETTLE_FINAL, **lease, output_json=STEP_OUTPUT, error_json=None, outcome="succeeded"
    )
    await pool.execute(sql.SETTLE_FINAL.sql, *settle)
    return times


async def _per_call_ns(calls: int, fn: Any) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for i in range(calls):
            await fn(i)
        best = min(best, (time.perf_counter() - started) / calls * 1e9)
    return best


@contextmanager
def encrypted() -> Iterator[None]:
    """Every value written inside the block encrypted (AES-256-GCM, a fresh key)."""
    register_codec(EncryptingCodec({"bench": os.urandom(32)}), replace=True)
    use_codec("aes-gcm")
    try:
        yield
    finally:
        use_codec("json")


async def run(settings: Settings, result: ScenarioResult) -> None:
    count = settings.pick(300, 10)
    rounds = settings.pick(5, 1)
    bare_ns = await _per_call_ns(settings.pick(100_000, 100), app.bare_add)
    inline_ns = await _per_call_ns(settings.pick(20_000, 100), app.add_one)
    worker_us = [
        await _worker_cpu_us(settings.pick(5000, 50), concurrency)
        for concurrency in (1, 32)
        for _ in range(rounds)
    ]
    null_executor = Executor(NullStore(), WorkflowConfig())
    null_us: list[float] = []
    cached_us: list[float] = []
    null_enc_us: list[float] = []
    cached_enc_us: list[float] = []
    for i in range(rounds):
        for plain in (i % 2 == 0, i % 2 == 1):  # each order in turn
            if plain:
                null_us += await _framework_steps(null_executor, _claimed(count, cached=False))
                cached_us += await _framework_steps(null_executor, _claimed(count, cached=True))
                continue
            with encrypted():
                claimed = _claimed(count, cached=False)
                null_enc_us += await _framework_steps(null_executor, claimed)
                claimed = _claimed(count, cached=True)
                cached_enc_us += await _framework_steps(null_executor, claimed)

    conn = await asyncpg.connect(settings.dsn)
    pool = await asyncpg.create_pool(settings.dsn, **sql.pool_options("durable_floor"))
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    pg_us: list[float] = []
    pg_enc_us: list[float] = []
    floor_us: list[float] = []
    try:
        await reset(conn)
        for i in range(rounds):
            if i % 2 == 0:
                floor_us += await _floor_steps(pool, count)
                pg_us += await _postgres_steps(store, client, count)
                with encrypted():
                    pg_enc_us += await _postgres_steps(store, client, count)
            else:
                with encrypted():
                    pg_enc_us += await _postgres_steps(store, client, count)
                pg_us += await _postgres_steps(store, client, count)
                floor_us += await _floor_steps(pool, count)
    finally:
        await reset(conn)
        await store.close()
        await pool.close()
        await conn.close()

    inserts, insert_cpu = await tx_steps.measure(settings, count, rounds)
    bare_insert = median(inserts["bare"])
    for kind, name, note in (
        (
            "here",
            "transaction step: one INSERT, the store's own database",
            "its record is the step's row, in the INSERT's transaction",
        ),
        (
            "elsewhere",
            "transaction step: one INSERT, another database",
            "its record is a durable_step_outputs row there; the step's row after",
        ),
        (
            "plain",
            "plain step doing the same INSERT (at least once)",
            "start_step, a transaction of its own (SQLAlchemy), complete_step",
        ),
    ):
        result.add(
            Figure(
                name=name,
                unit="us",
                value=median(inserts[kind]),
                floor=bare_insert,
                better="lower",
                note=f"floor = BEGIN; INSERT; COMMIT by bare asyncpg; {note}",
            )
        )
    result.add(
        Figure(
            name="transaction step (store's database) / plain step doing the same INSERT",
            unit="us",
            value=median(inserts["here"]),
            floor=median(inserts["plain"]),
            better="lower",
            note="floor = the plain step's figure above, same run",
        )
    )
    result.add(
        Figure(
            name="CPU per transaction step (store's database), this process",
            unit="us",
            value=median(insert_cpu["here"]),
            floor=median(insert_cpu["bare"]),
            better="lower",
            note=f"floor = bare asyncpg's CPU per INSERT transaction; a plain step doing the "
            f"same INSERT: {median(insert_cpu['plain']):.0f} us, another database: "
            f"{median(insert_cpu['elsewhere']):.0f} us",
        )
    )
    result.details["insert_us"] = {kind: median(values) for kind, values in inserts.items()}
    result.details["insert_cpu_us"] = {k: median(v) for k, v in insert_cpu.items()}
    bare_us = bare_ns / 1000
    result.add(
        Figure(
            name="persisted step on PostgreSQL",
            unit="us",
            value=median(pg_us),
            floor=median(floor_us),
            better="lower",
            note="floor = start_step + complete_step statements by bare asyncpg",
        )
    )
    result.add(
        Figure(
            name="framework CPU per persisted step (store does nothing)",
            unit="us",
            value=median(null_us),
            floor=bare_us,
            better="lower",
            note=f"floor = bare await of the step function ({bare_ns:.0f} ns)",
        )
    )
    result.add(
        Figure(
            name="step replayed from the cache",
            unit="us",
            value=median(cached_us),
            floor=bare_us,
            better="lower",
            note="floor = bare await of the step function",
        )
    )
    result.add(
        Figure(
            name="step called outside a workflow (inline)",
            unit="us",
            value=inline_ns / 1000,
            floor=bare_us,
            better="lower",
            note="floor = bare await of the step function",
        )
    )
    result.add(
        Figure(
            name="framework CPU per three-step workflow, whole worker path (store does nothing)",
            unit="us",
            value=median(worker_us),
            better="lower",
            note="WorkflowWorker at concurrency 1 and 32: claim loop, executor, steps, settle, "
            "hooks (no log handler in-process); every store call only yields once",
        )
    )
    same_run = "floor = the same step with the JSON codec, same rounds"
    result.add(
        Figure(
            name="persisted step on PostgreSQL, payloads encrypted (AES-GCM)",
            unit="us",
            value=median(pg_enc_us),
            floor=median(pg_us),
            better="lower",
            note=same_run,
        )
    )
    result.add(
        Figure(
            name="framework CPU per persisted step, payloads encrypted (store does nothing)",
            unit="us",
            value=median(null_enc_us),
            floor=median(null_us),
            better="lower",
            note=same_run,
        )
    )
    result.add(
        Figure(
            name="step replayed from the cache, payloads encrypted",
            unit="us",
            value=median(cached_enc_us),
            floor=median(cached_us),
            better="lower",
            note=same_run + " (the replay decrypts its input and output)",
        )
    )
    result.details["worker_cpu_us"] = worker_us
    result.details["steps_per_workflow"] = count
    result.details["overhead_us_over_floor"] = median(pg_us) - median(floor_us)
