"""A design probe: what the project's schema costs the server on the hot path.

``python -m bench.schema_probe [--url URL] [--count 4000] [--pairs 5] [--concurrency 32]
[--variants base,hot,nofk,both,nofk_locked]`` drains ``--count`` three-step workflows with the
group-commit floor's writer (:class:`bench.group_floor.GroupCommitter`: one flush in
flight, the floor's statements, every write fenced by its lease) and a claim loop in
this process, in turns whose order rotates from pair to pair, on a database of each
variant beside the bench's (``<db>_probe_<variant>``):

- ``base``: the project's schema as it is. A claim and a settle each change ``status``,
  which most indexes of ``workflows`` hold, so neither update is HOT: each writes an
  entry into every index of the table. Each step row and attempt row inserted has its
  foreign key checked (a query and a row lock on ``workflows`` per row).
- ``hot``: every index that holds a column a claim or a settle changes moved off
  ``workflows`` (:data:`HOT_SCHEMA`): the pending and running rows in ``workflow_ready``
  (lanes, due time or lease expiry, status; a claim updates its row, a settle deletes
  it), the ended ones in ``workflow_ended`` (what the lists of ended workflows need; a
  settle inserts it), ``workflows`` at fillfactor 70, so that its two updates are HOT.
- ``nofk``: the project's schema without the foreign keys of ``workflow_steps`` and
  ``workflow_attempts`` (:data:`NO_FOREIGN_KEYS`).
- ``both``: ``hot`` and ``nofk`` together.
- ``nofk_locked``: ``nofk`` with each flush locking the workflow rows of its step rows
  (:data:`FLUSH_LOCKING`), as the foreign key's check does, so a delete of a workflow
  still waits for a flush writing its steps.

Each turn prints its throughput, the worker's and the server's CPU per workflow (this
process; the two server processes serving it, from ``/proc``) and the share of the
turn's updates of ``workflows`` that were HOT; at the end, each variant's medians against
``base``'s. Only PostgreSQL 15 or later (``pg_stat_force_next_flush``), on this
machine. It exits 2 when an update of a variant without HOT updates was HOT, or a turn
of one with them had none (the probe would not measure what it says).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from dataclasses import dataclass

import asyncpg

from bench import DEFAULT_URL, own_sql
from bench.common import ensure_database, median, plain_dsn, prepare_schema
from bench.floor import LEASE_SECONDS, step_name
from bench.group_floor import GroupCommitter
from bench.procs import cpu_seconds

MOVED = (
    "ix_workflows_route",
    "ix_workflows_status_created_at",
    "ix_workflows_status_locked_until",
    "ix_workflows_status_run_at",
    "ix_workflows_completed_at",
    "ix_workflows_queue_started_at",
    "ix_workflows_concurrency_key",
    "ix_workflows_keyed",
)
"""The indexes of ``workflows`` holding a column (or a condition on one) that a claim or a
settle changes: ``status``, ``locked_until``, ``started_at`` or ``completed_at``."""

HOT_SCHEMA = f"""
DROP INDEX IF EXISTS {", ".join(MOVED)};
ALTER TABLE workflows SET (fillfactor = 70);
CREATE TABLE IF NOT EXISTS workflow_ready (
    id varchar(255) PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    status varchar(16) NOT NULL,
    queue varchar(255) NOT NULL,
    name varchar(255) NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_ready_due ON workflow_ready (run_at);
CREATE INDEX IF NOT EXISTS ix_ready_route ON workflow_ready (queue, name, priority DESC, run_at);
CREATE INDEX IF NOT EXISTS ix_ready_status ON workflow_ready (status, created_at);
CREATE TABLE IF NOT EXISTS workflow_ended (
    id varchar(255) PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    status varchar(16) NOT NULL,
    queue varchar(255) NOT NULL,
    created_at timestamptz NOT NULL,
    completed_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_ended_completed ON workflow_ended (completed_at, queue, status);
CREATE INDEX IF NOT EXISTS ix_ended_status ON workflow_ended (status, created_at);
"""
"""Applied on the project's schema: the indexes :data:`MOVED` go, two tables take their
work (an index for each of the moved ones' queries: lanes, due rows and expired leases,
lists by status, the window of ended workflows)."""

_TABLES = "workflows, workflow_steps, workflow_attempts, workflow_step_tries"

ENQUEUE = """
INSERT INTO workflows
    (id, name, status, input, max_attempts, run_at, created_at, updated_at, queue)
SELECT 'probe-' || $2 || '-' || n, 'bench.app.three_steps', 'pending',
       '{"args":[' || n || '],"kwargs":{}}', 3, now(), now(), now(), 'default'
FROM generate_series(1, $1) AS n
"""
"""``$1`` pending three-step workflows (``$2``: a prefix of their ids)."""

ENQUEUE_READY = """
INSERT INTO workflow_ready (id, status, queue, name, priority, run_at, created_at)
SELECT id, status, queue, name, priority, run_at, created_at FROM workflows
"""

CLAIM_HOT = """
WITH picked AS (
    SELECT id FROM workflow_ready
    WHERE run_at <= now()
    ORDER BY run_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE workflow_ready AS r
    SET status = 'running', run_at = now() + $2 * interval '1 second'
    FROM picked WHERE r.id = picked.id
)
UPDATE workflows AS w
SET status = 'running', attempts = w.attempts + 1, locked_by = $1,
    lock_token = gen_random_uuid()::text, locked_until = now() + $2 * interval '1 second',
    updated_at = now(), started_at = coalesce(w.started_at, now())
FROM picked
WHERE w.id = picked.id
RETURNING w.id, w.input, w.lock_token, w.attempts, now() AS claimed_at
"""
"""The floor's claim (:data:`bench.own_sql.CLAIM`) from ``workflow_ready``: a running
row stays there, due again when its lease expires."""


def _edited(part: str, replacement: str) -> str:
    """The floor's flush with ``part`` (which it must hold once) replaced."""
    if own_sql.FLUSH.count(part) != 1:
        raise RuntimeError(f"bench.own_sql.FLUSH no longer holds {part!r} once")
    return own_sql.FLUSH.replace(part, replacement)


_SETTLED = "    RETURNING w.id\n), recorded AS ("
FLUSH_HOT = _edited(
    _SETTLED,
    """    RETURNING w.id, w.queue, w.created_at
), unready AS (
    DELETE FROM workflow_ready AS r USING settled WHERE r.id = settled.id
), ended AS (
    INSERT INTO workflow_ended (id, status, queue, created_at, completed_at)
    SELECT id, 'succeeded', queue, created_at, now() FROM settled
), recorded AS (""",
)
"""The floor's flush (:data:`bench.own_sql.FLUSH`); a settle also deletes its row of
``workflow_ready`` and inserts one into ``workflow_ended``."""

_FENCE = "JOIN workflows AS w ON w.id = u.id AND w.lock_token = u.token\n"
FLUSH_LOCKING = _edited(_FENCE, _FENCE + "    FOR KEY SHARE OF w\n")
"""The floor's flush with its step rows' workflow rows locked as a foreign key's check
locks them (``FOR KEY SHARE``), in the statement itself: a delete of the workflow waits
for the flush, without a check query per row."""

NO_FOREIGN_KEYS = """
ALTER TABLE workflow_steps DROP CONSTRAINT IF EXISTS fk_workflow_steps_workflow_id;
ALTER TABLE workflow_attempts DROP CONSTRAINT IF EXISTS fk_workflow_attempts_workflow_id;
"""
"""Applied on the project's schema: the foreign keys checked on the hot path go."""


@dataclass(frozen=True)
class Variant:
    """A schema the probe drains on: what it applies on the project's, and whether its
    claim and settle are HOT (its own claim and flush, and its two tables)."""

    changes: str
    hot: bool
    flush: str = own_sql.FLUSH


VARIANTS = {
    "base": Variant("", hot=False),
    "hot": Variant(HOT_SCHEMA, hot=True, flush=FLUSH_HOT),
    "nofk": Variant(NO_FOREIGN_KEYS, hot=False),
    "both": Variant(HOT_SCHEMA + NO_FOREIGN_KEYS, hot=True, flush=FLUSH_HOT),
    "nofk_locked": Variant(NO_FOREIGN_KEYS, hot=False, flush=FLUSH_LOCKING),
}

_SERVER_SETTINGS = {"jit": "off", "plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}
"""The store's own session settings (:mod:`durable_postgres.store`)."""


@dataclass(frozen=True)
class Turn:
    """One drain: workflows per second, CPU microseconds per workflow, HOT share."""

    rate: float
    worker_us: float
    server_us: float
    hot_share: float


def probe_url(url: str, variant: str) -> str:
    """The probe's database of ``variant`` beside the bench's: ``<db>_probe_<variant>``."""
    base, _, query = url.partition("?")
    return f"{base}_probe_{variant}" + (f"?{query}" if query else "")


async def _updates(conn: asyncpg.Connection) -> tuple[int, int]:
    """Updates of ``workflows`` so far, and how many were HOT (as the sessions that made
    them last reported: see ``pg_stat_force_next_flush``)."""
    row = await conn.fetchrow(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'workflows'"
    )
    assert row is not None
    return int(row[0]), int(row[1])


async def drain(url: str, variant: str, count: int, concurrency: int) -> Turn:
    """Enqueue ``count`` workflows on ``variant``'s database (made by :func:`prepare`)
    and drain them."""
    hot = VARIANTS[variant].hot
    dsn = plain_dsn(url)
    admin = await asyncpg.connect(dsn)
    claimer = await asyncpg.connect(dsn, server_settings=_SERVER_SETTINGS)
    writer = await asyncpg.connect(dsn, server_settings=_SERVER_SETTINGS)
    committer = GroupCommitter(writer, flush=VARIANTS[variant].flush)
    flusher = asyncio.create_task(committer.run())
    try:
        tables = f"workflow_ready, workflow_ended, {_TABLES}" if hot else _TABLES
        await admin.execute(f"TRUNCATE {tables} CASCADE")
        await admin.execute(ENQUEUE, count, uuid.uuid4().hex[:8])
        if hot:
            await admin.execute(ENQUEUE_READY)
        await admin.execute("ANALYZE")
        updates_before = await _updates(admin)
        backends = [await c.fetchval("SELECT pg_backend_pid()") for c in (claimer, writer)]
        server_before = sum(cpu_seconds(pid) for pid in backends)
        began, cpu_began = time.perf_counter(), time.process_time()
        await _run(claimer, committer, count, concurrency, CLAIM_HOT if hot else own_sql.CLAIM)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu_began
        server = sum(cpu_seconds(pid) for pid in backends) - server_before
        for conn in (claimer, writer):
            await conn.execute("SELECT pg_stat_force_next_flush()")
        updates_after = await _updates(admin)
        updates = updates_after[0] - updates_before[0]
        hot_updates = updates_after[1] - updates_before[1]
        if updates <= 0:
            raise RuntimeError(f"{variant}: the statistics show no update of workflows")
        ended = await admin.fetchval("SELECT count(*) FROM workflows WHERE status = 'succeeded'")
        if ended != count:
            raise RuntimeError(f"{variant}: {ended} of {count} workflows succeeded")
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        for conn in (admin, claimer, writer):
            await conn.close()
    return Turn(count / wall, cpu / count * 1e6, server / count * 1e6, hot_updates / updates)


async def _run(
    claimer: asyncpg.Connection, committer: GroupCommitter, count: int, concurrency: int, claim: str
) -> None:
    """Claim into free slots and run each workflow's three steps and settle, until
    ``count`` have settled."""
    settled = 0
    running = 0
    failed: list[BaseException] = []
    slot_free = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    async def run_one(row: asyncpg.Record) -> None:
        nonlocal settled, running
        workflow_id, input_json, token, attempt, claimed_at = row
        try:
            n = own_sql.first_argument(input_json)
            for index in range(3):
                output = own_sql.body(index, n)
                await committer.step(
                    workflow_id, token, index, step_name(index), own_sql.step_input(n), str(output)
                )
                n = output
            await committer.settle(workflow_id, token, str(n), attempt, "probe", claimed_at)
            settled += 1
        except Exception as exc:
            failed.append(exc)
        finally:
            running -= 1
            slot_free.set()

    while settled < count and not failed:
        free = concurrency - running
        if free > 0 and settled + running < count:
            rows = await claimer.fetch(claim, "probe", LEASE_SECONDS, free)
            for row in rows:
                running += 1
                task = asyncio.create_task(run_one(row))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if rows:
                continue
            if not running:
                raise RuntimeError(f"nothing left to claim, {settled} of {count} settled")
        slot_free.clear()
        await slot_free.wait()
    await asyncio.gather(*tasks)
    if failed:
        raise RuntimeError(f"a workflow failed: {failed[0]!r}") from failed[0]


async def prepare(url: str, variant: str) -> str:
    """Make ``variant``'s database beside ``url``'s afresh; return its URL."""
    variant_url = probe_url(url, variant)
    await ensure_database(variant_url)
    conn = await asyncpg.connect(plain_dsn(variant_url))
    try:
        await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        await conn.close()
    await prepare_schema(variant_url)
    if VARIANTS[variant].changes:
        conn = await asyncpg.connect(plain_dsn(variant_url))
        try:
            await conn.execute(VARIANTS[variant].changes)
        finally:
            await conn.close()
    return variant_url


async def _main(
    url: str, variants: list[str], count: int, pairs: int, concurrency: int
) -> dict[str, list[Turn]]:
    urls = {variant: await prepare(url, variant) for variant in variants}
    turns: dict[str, list[Turn]] = {variant: [] for variant in variants}
    for pair in range(pairs):
        shift = pair % len(variants)
        order = [*variants[shift:], *variants[:shift]]
        for variant in order if pair % 2 == 0 else order[::-1]:
            turn = await drain(urls[variant], variant, count, concurrency)
            turns[variant].append(turn)
            print(
                f"{variant}: {turn.rate:,.0f} workflows/s, worker {turn.worker_us:.0f} us, "
                f"server {turn.server_us:.0f} us per workflow, {turn.hot_share:.0%} of "
                "updates HOT",
                flush=True,
            )
    return turns


def main(argv: list[str] | None = None) -> int:
    """Run the probe; print each turn and each variant's medians against ``base``'s."""
    parser = argparse.ArgumentParser(prog="python -m bench.schema_probe")
    parser.add_argument("--url", default=os.environ.get("DURABLE_BENCH_URL", DEFAULT_URL))
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args(argv)
    variants = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or "base" not in variants:
        parser.error(f"--variants: base and any of {', '.join(VARIANTS)}; not {unknown}")
    turns = asyncio.run(_main(args.url, variants, args.count, args.pairs, args.concurrency))

    def med(variant: str, field: str) -> float:
        return median([getattr(turn, field) for turn in turns[variant]])

    def against_base(value: float, field: str) -> str:
        # A smoke run's CPU can read zero: /proc counts in ticks of 10 ms.
        base = med("base", field)
        return f"{value / base:.2f}x" if base else "n/a"

    print(f"medians of {args.pairs} turns each, {args.count} workflows, c={args.concurrency}:")
    for variant in variants:
        rate, server = med(variant, "rate"), med(variant, "server_us")
        print(
            f"  {variant}: {rate:,.0f} workflows/s ({against_base(rate, 'rate')} base), "
            f"server CPU {server:.0f} us ({against_base(server, 'server_us')}), "
            f"worker CPU {med(variant, 'worker_us'):.0f} us per workflow"
        )
    wrong = [
        variant
        for variant in variants
        for turn in turns[variant]
        if (turn.hot_share > 0) != VARIANTS[variant].hot
    ]
    if wrong:
        print(f"bench.schema_probe: HOT updates where none belong, or none where they do: {wrong}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
