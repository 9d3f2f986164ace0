"""Waiting workflows on real worker processes and the real PostgreSQL.

Durable sleep, messages, child workflows and idempotent starts, driven through
``durable worker`` subprocesses (killed with SIGKILL where the test says so).
Each test asserts on what the database holds afterwards: the workflow and step
rows, the ``step_runs`` side table in which every step body records each run,
and the ``receipts`` table in which a step records what its body received.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from durable_core import DurableClient, WorkflowConflictError, WorkflowStatus
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import ROOT, Workers, eventually

LEASE = 2
"""WORKFLOW_LOCK_TIMEOUT_SECS of the tests that kill a worker: reclaimed 2 s later."""

SLEEP = "durable.sleep"
RECV = "durable.recv"
START = "durable.start"


@pytest.fixture
async def receipts(pg: PostgresStore, sql: asyncpg.Connection) -> asyncpg.Connection:
    """An empty ``receipts`` side table (see ``app.keep_receipt``)."""
    await sql.execute(app.RECEIPTS_DDL)
    await sql.execute("TRUNCATE receipts")
    return sql


async def count(sql: asyncpg.Connection, query: str, *args: object) -> int:
    return int(await sql.fetchval(query, *args))


async def statuses_reach(
    sql: asyncpg.Connection, status: str, n: int, *, timeout: float, waiting_for: str | None = None
) -> None:
    """Wait until ``n`` workflows are ``status`` (and wait for ``waiting_for``)."""

    async def reached() -> bool:
        query = "SELECT count(*) FROM workflows WHERE status = $1"
        args: list[object] = [status]
        if waiting_for is not None:
            query += " AND waiting_for = $2"
            args.append(waiting_for)
        return await count(sql, query, *args) == n

    what = f"{n} workflows {status}" + (f" for {waiting_for}" if waiting_for else "")
    await eventually(reached, timeout=timeout, what=what)


async def step_ran(sql: asyncpg.Connection, step: str, *, what: str) -> None:
    """Wait until a worker has entered ``step`` (recorded in ``step_runs``)."""

    async def entered() -> bool:
        return await count(sql, "SELECT count(*) FROM step_runs WHERE step = $1", step) > 0

    await eventually(entered, timeout=120, what=what)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and reap it."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)


async def test_fifty_sleepers_at_concurrency_one_hold_no_slot(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    workers.start(WORKFLOW_CONCURRENCY=1)
    client = DurableClient(pg)
    warmup = await client.start_workflow(app.instant)
    assert await warmup.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED

    # Ten seconds' sleep: room, on a slow machine, for all to suspend and the ordinary
    # workflow to run before the first wakes (asserted below by the database's clock).
    sleepers = await client.start_workflows(app.sleeper, [(10.0,)] * 50)
    ids = [h.id for h in sleepers]
    await statuses_reach(sql, "waiting", 50, timeout=120, waiting_for="sleep")
    held = await sql.fetchrow(
        "SELECT count(*) FILTER (WHERE locked_by IS NOT NULL OR lock_token IS NOT NULL) AS leased,"
        " max(attempts) AS attempts FROM workflows WHERE id = any($1)",
        ids,
    )
    assert (held["leased"], held["attempts"]) == (0, 0), "a sleeper holds no lease, no attempt"

    ordinary = await client.start_workflow(app.instant)
    assert await ordinary.wait_with_timeout(120) is WorkflowStatus.SUCCEEDED
    row = await sql.fetchrow("SELECT completed_at FROM workflows WHERE id = $1", ordinary.id)

    await statuses_reach(sql, "succeeded", 52, timeout=120)
    first_woke = await sql.fetchval(
        "SELECT min(at) FROM step_runs WHERE step = 'woke' AND workflow_id = any($1)", ids
    )
    assert row["completed_at"] < first_woke, "the ordinary workflow finished before any sleeper"

    rows = await sql.fetch(
        "SELECT w.id, w.attempts, w.output, w.created_at, w.completed_at, s.output AS deadline, "
        "s.status AS sleep_status, r.at AS woke_at "
        "FROM workflows w "
        "JOIN workflow_steps s ON s.workflow_id = w.id AND s.step_index = 0 "
        "JOIN step_runs r ON r.workflow_id = w.id AND r.step = 'woke' "
        "WHERE w.id = any($1)",
        ids,
    )
    assert len(rows) == 50, "each sleeper slept once and woke once"
    for r in rows:
        deadline = datetime.fromisoformat(json.loads(r["deadline"]))
        assert r["attempts"] == 1, "sleeping consumed no attempt"
        assert r["output"] == '"rested"' and r["sleep_status"] == "succeeded"
        assert deadline - r["created_at"] >= timedelta(seconds=10)
        assert r["woke_at"] >= deadline, "woke no earlier than its deadline"
        assert r["completed_at"] - r["created_at"] >= timedelta(seconds=10)
    names = await sql.fetch(
        "SELECT step_name, count(*) AS n FROM workflow_steps WHERE workflow_id = any($1) "
        "GROUP BY step_name",
        ids,
    )
    assert {r["step_name"]: r["n"] for r in names} == {SLEEP: 50, "tests.worker.app.woke": 50}


async def test_sigkill_after_a_sleep_reclaims_without_sleeping_again(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    handle = await DurableClient(pg).start_workflow(app.sleep_then_block, 2.0, 7)
    victim = workers.start(
        WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=1, DURABLE_LOG_LEVEL="DEBUG"
    )
    await statuses_reach(sql, "waiting", 1, timeout=120, waiting_for="sleep")
    await step_ran(sql, "after_sleep", what="the worker to enter the step after the sleep")

    slept = await sql.fetchrow(
        "SELECT step_name, status, output, attempts, started_at, completed_at "
        "FROM workflow_steps WHERE workflow_id = $1 AND step_index = 0",
        handle.id,
    )
    assert (slept["step_name"], slept["status"]) == (SLEEP, "succeeded")
    kill(victim)
    row = await sql.fetchrow("SELECT status, attempts FROM workflows WHERE id = $1", handle.id)
    assert (row["status"], row["attempts"]) == ("running", 1)

    killed_at = time.monotonic()
    rescuer = workers.start(
        WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=1, DURABLE_LOG_LEVEL="DEBUG"
    )
    assert await handle.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    assert time.monotonic() - killed_at >= LEASE / 2, "reclaimed only once the lease expired"
    assert await handle.output() == 70
    assert (await handle.info()).attempts == 2

    again = await sql.fetchrow(
        "SELECT step_name, status, output, attempts, started_at, completed_at "
        "FROM workflow_steps WHERE workflow_id = $1 AND step_index = 0",
        handle.id,
    )
    assert again == slept, "the reclaim replayed the sleep from its record, untouched"
    assert await count(sql, "SELECT count(*) FROM workflow_steps") == 2
    runs = await sql.fetch("SELECT step, attempt, worker FROM step_runs ORDER BY at")
    assert [(r["step"], r["attempt"]) for r in runs] == [("after_sleep", 1), ("after_sleep", 2)]
    assert runs[0]["worker"] != runs[1]["worker"]
    assert "waiting for sleep" in workers.log(victim)
    assert "waiting for sleep" not in workers.log(rescuer), "the rescuer did not sleep again"


SENDER = """
import asyncio, json, sys
from durable_core import DurableClient
from durable_postgres import PostgresStore

async def main() -> None:
    url, path, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(path) as f:
        targets = json.load(f)
    async with PostgresStore(url) as store:
        client = DurableClient(store)
        for workflow_id, value in targets:
            await client.send(workflow_id, value, topic="pay", idempotency_key="pay:" + workflow_id)
            await asyncio.sleep(pause)
    print("sent", len(targets), flush=True)

asyncio.run(main())
"""


async def test_200_receivers_get_their_own_message_once_across_two_sigkills(
    pg: PostgresStore, workers: Workers, receipts: asyncpg.Connection, tmp_path: Path
) -> None:
    sql = receipts
    start = functools.partial(
        workers.start, WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=8
    )
    handles = await DurableClient(pg).start_workflows(app.receive_and_keep, [("pay",)] * 200)
    expected: dict[str, dict[str, object]] = {
        h.id: {"order": n, "cents": 100 + n} for n, h in enumerate(handles)
    }
    targets = list(expected)
    random.Random(7).shuffle(targets)
    # Three messages make their receiver block in the step after the receive (app.hold),
    # so each kill lands on a workflow that has received and not finished: the 6th and
    # 16th sent hang in the first worker, the 151st in the second.
    held = [targets[5], targets[15], targets[150]]
    for workflow_id in held:
        expected[workflow_id]["hold"] = True
    first = start()
    await statuses_reach(sql, "waiting", 200, timeout=120, waiting_for="message:pay")

    (tmp_path / "targets.json").write_text(json.dumps([(t, expected[t]) for t in targets]))
    sender = subprocess.Popen(
        [sys.executable, "-c", SENDER, workers.url, str(tmp_path / "targets.json"), "0.02"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    async def progress(*, receipts: int, holds: int, settled: list[str]) -> None:
        async def reached() -> bool:
            return (
                await count(sql, "SELECT count(*) FROM receipts") >= receipts
                and await count(sql, "SELECT count(*) FROM step_runs WHERE step = 'hold'") >= holds
                and await count(
                    sql,
                    "SELECT count(*) FROM workflows WHERE id = any($1) AND status = 'succeeded'",
                    settled,
                )
                == len(settled)
            )

        what = f"{receipts} receipts, {holds} receivers holding, {len(settled)} of them settled"
        await eventually(reached, timeout=120, what=what)

    async def receive_rows(ids: list[str]) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await sql.fetch(
            "SELECT workflow_id, step_index, status, output, attempts, completed_at "
            "FROM workflow_steps WHERE step_name = $1 AND workflow_id = any($2) "
            "ORDER BY workflow_id",
            RECV,
            ids,
        )
        return rows

    try:
        await progress(receipts=40, holds=2, settled=[])
        assert sender.poll() is None, "the first kill lands while messages are being sent"
        kill(first)
        before_reclaim = await receive_rows(held[:2])
        assert len(before_reclaim) == 2, "the held receivers had received before the kill"
        second = start()
        await progress(receipts=120, holds=3, settled=held[:2])
        kill(second)
        third = start()
        await statuses_reach(sql, "succeeded", 200, timeout=60)
        out, _ = sender.communicate(timeout=30)
    finally:
        if sender.poll() is None:
            kill(sender)
    assert sender.returncode == 0 and b"sent 200" in out, out

    unread = "SELECT count(*) FROM workflow_messages WHERE consumed_at IS NULL"
    assert await count(sql, unread) == 0, "every message taken"
    assert await count(sql, "SELECT count(*) FROM workflow_messages") == 200, "each kept once"
    rows = await sql.fetch("SELECT id, output, attempts FROM workflows")
    assert {r["id"]: json.loads(r["output"]) for r in rows} == expected
    attempts = {r["id"]: r["attempts"] for r in rows}
    assert [attempts[h] for h in held] == [2, 2, 2], "each held receiver was reclaimed once"

    received = await sql.fetch(
        "SELECT workflow_id, status, output FROM workflow_steps WHERE step_name = $1", RECV
    )
    assert len(received) == 200, "one receive recorded per workflow"
    assert {r["workflow_id"]: json.loads(r["output"]) for r in received} == expected
    assert {r["status"] for r in received} == {"succeeded"}
    assert await receive_rows(held[:2]) == before_reclaim, "the reclaim replayed the receive"

    holds = await sql.fetch(
        "SELECT workflow_id, attempt, worker FROM step_runs WHERE step = 'hold'"
    )
    assert sorted((r["workflow_id"], r["attempt"]) for r in holds) == sorted((h, 1) for h in held)
    pid = {r["workflow_id"]: r["worker"].split(":")[1] for r in holds}
    assert [pid[h] for h in held] == [str(first.pid), str(first.pid), str(second.pid)]

    kept: defaultdict[str, list[asyncpg.Record]] = defaultdict(list)
    for r in await sql.fetch("SELECT workflow_id, value, attempt, worker FROM receipts"):
        kept[r["workflow_id"]].append(r)
    assert set(kept) == set(expected)
    for workflow_id in held:
        assert [r["attempt"] for r in kept[workflow_id]] == [2]
    rerun = []
    for workflow_id, runs in kept.items():
        assert [json.loads(r["value"]) for r in runs] == [expected[workflow_id]] * len(runs)
        if len(runs) > 1:
            # A kill between the receipt step's insert and its completion runs that step
            # again on the reclaim (a step is at-least-once), never twice in one attempt.
            assert len({r["attempt"] for r in runs}) == len(runs), runs
            assert attempts[workflow_id] >= len(runs), runs
            rerun.append(workflow_id)
    assert len(rerun) <= 2 * 8, "only steps in flight in a killed worker ran again"
    pids = {r["worker"].split(":")[1] for runs in kept.values() for r in runs}
    assert pids == {str(p.pid) for p in (first, second, third)}, "all three workers took part"


async def test_a_message_sent_before_recv_is_received_and_a_timeout_returns_none(
    pg: PostgresStore, workers: Workers, receipts: asyncpg.Connection
) -> None:
    sql = receipts
    client = DurableClient(pg)
    early = await client.start_workflow(app.receive_and_keep, "hello")
    await client.send(early.id, {"greeting": "first"}, topic="hello")
    await client.send(early.id, {"greeting": "second"}, topic="hello")
    await client.send(early.id, "other topic", topic="elsewhere")
    proc = workers.start(WORKFLOW_CONCURRENCY=1, DURABLE_LOG_LEVEL="DEBUG")
    assert await early.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    assert await early.output() == {"greeting": "first"}, "the oldest message on the topic"
    left = await sql.fetch(
        "SELECT topic, payload FROM workflow_messages WHERE consumed_at IS NULL ORDER BY seq"
    )
    assert [(r["topic"], json.loads(r["payload"])) for r in left] == [
        ("hello", {"greeting": "second"}),
        ("elsewhere", "other topic"),
    ]
    assert (await early.info()).attempts == 1
    assert "waiting for message:hello" not in workers.log(proc), "it never had to wait"

    timeout = 1.0
    late = await client.start_workflow(app.receive_and_keep, "never", timeout)
    assert await late.wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
    assert await late.output() is None
    row = await sql.fetchrow(
        "SELECT attempts, extract(epoch FROM completed_at - created_at) AS took "
        "FROM workflows WHERE id = $1",
        late.id,
    )
    assert row["took"] >= timeout, f"timed out after {row['took']:.2f}s"
    assert row["attempts"] == 1
    assert "waiting for message:never" in workers.log(proc), "it suspended until the timeout"
    kept = await sql.fetch("SELECT workflow_id, value FROM receipts ORDER BY at")
    assert [(r["workflow_id"], json.loads(r["value"])) for r in kept] == [
        (early.id, {"greeting": "first"}),
        (late.id, None),
    ]


@dataclass
class FanOut:
    """What the database says about a parent's fan-out."""

    children: set[str]
    started: set[str]
    """The child ids the parent's one ``durable.start`` step recorded."""
    statuses: set[str]
    outputs: list[int]
    attempts: dict[str, int]
    runs: dict[str, list[int]]
    """Per child, the attempt of each run of its step, in order."""
    total: int


async def fan_out(sql: asyncpg.Connection, parent_id: str) -> FanOut:
    children = await sql.fetch(
        "SELECT id, status, output, attempts FROM workflows WHERE parent_id = $1", parent_id
    )
    [start] = await sql.fetch(
        "SELECT output FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2",
        parent_id,
        START,
    )
    runs: defaultdict[str, list[int]] = defaultdict(list)
    for r in await sql.fetch(
        "SELECT workflow_id, attempt FROM step_runs WHERE step = 'child' ORDER BY at"
    ):
        runs[r["workflow_id"]].append(r["attempt"])
    return FanOut(
        children={r["id"] for r in children},
        started=set(json.loads(start["output"])),
        statuses={r["status"] for r in children},
        outputs=sorted(json.loads(r["output"]) for r in children),
        attempts={r["id"]: r["attempts"] for r in children},
        runs=dict(runs),
        total=await count(sql, "SELECT count(*) FROM workflows"),
    )


async def test_a_parent_fans_out_100_children_at_concurrency_one(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    parent = await DurableClient(pg).start_workflow(app.fan_out_sum, 100)
    workers.start(WORKFLOW_CONCURRENCY=1)
    assert await parent.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert await parent.output() == 2 * sum(range(100))
    assert (await parent.info()).attempts == 1, "waiting on children consumed no attempt"

    seen = await fan_out(sql, parent.id)
    assert len(seen.children) == 100 and seen.total == 101
    assert seen.started == seen.children
    assert seen.statuses == {"succeeded"}
    assert seen.outputs == [2 * i for i in range(100)]
    assert seen.attempts == dict.fromkeys(seen.children, 1)
    assert seen.runs == {child: [1] for child in seen.children}, "each child ran once"


async def test_sigkill_mid_fan_out_starts_no_child_twice(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    parent = await DurableClient(pg).start_workflow(app.fan_out_sum, 100, 37)
    victim = workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=1)
    await step_ran(sql, "hanging", what="child 37 to block in its step")
    kill(victim)
    assert await count(sql, "SELECT count(*) FROM workflows WHERE parent_id = $1", parent.id) == 100
    assert await parent.status() in (WorkflowStatus.WAITING, WorkflowStatus.PENDING)
    hung = await sql.fetchval("SELECT workflow_id FROM step_runs WHERE step = 'hanging'")

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=LEASE, WORKFLOW_CONCURRENCY=1)
    assert await parent.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert await parent.output() == 2 * sum(range(100))
    assert (await parent.info()).attempts == 1, "the parent held no slot when the worker died"
    assert await DurableClient(pg).handle(hung).output() == 74

    seen = await fan_out(sql, parent.id)
    assert len(seen.children) == 100 and seen.total == 101
    assert seen.started == seen.children
    assert seen.statuses == {"succeeded"}
    assert seen.outputs == [2 * i for i in range(100)]
    assert seen.attempts == {**dict.fromkeys(seen.children, 1), hung: 2}
    assert seen.runs == {**{child: [1] for child in seen.children}, hung: [1, 2]}, (
        "only the child killed mid-step ran again"
    )


async def test_concurrent_starts_with_one_id_leave_one_row(
    postgres_url: str, pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    store = PostgresStore(postgres_url, min_size=20, max_size=20)
    await store.open()
    try:
        client = DurableClient(store)
        handles = await asyncio.gather(
            *(client.start_workflow_with_id("order-42", app.three_steps, 5) for _ in range(20))
        )
        assert {h.id for h in handles} == {"order-42"}
        assert await count(sql, "SELECT count(*) FROM workflows") == 1

        mixed = await asyncio.gather(
            *(client.start_workflow_with_id("order-43", app.three_steps, n % 2) for n in range(20)),
            return_exceptions=True,
        )
        won = [m for m in mixed if not isinstance(m, BaseException)]
        lost = [m for m in mixed if isinstance(m, BaseException)]
        assert len(won) == len(lost) == 10, mixed
        assert all(isinstance(e, WorkflowConflictError) for e in lost), lost
        assert await count(sql, "SELECT count(*) FROM workflows") == 2

        workers.start(WORKFLOW_CONCURRENCY=4)
        assert await handles[0].wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
        assert await won[0].wait_with_timeout(30) is WorkflowStatus.SUCCEEDED
        assert await handles[0].output() == 9
        before = await sql.fetchrow("SELECT * FROM workflows WHERE id = 'order-42'")

        with pytest.raises(WorkflowConflictError, match="cannot start it again"):
            await client.start_workflow_with_id("order-42", app.three_steps, 6)
        with pytest.raises(WorkflowConflictError, match="is taken by workflow"):
            await client.start_workflow_with_id("order-42", app.slow_flow, 5.0)
        repeat = await client.start_workflow_with_id("order-42", app.three_steps, 5)
        assert await repeat.output() == 9
    finally:
        await store.close()

    assert await sql.fetchrow("SELECT * FROM workflows WHERE id = 'order-42'") == before
    assert await count(sql, "SELECT count(*) FROM workflows") == 2
    runs = await sql.fetch(
        "SELECT workflow_id, step, count(*) AS n FROM step_runs GROUP BY workflow_id, step"
    )
    assert sorted((r["workflow_id"], r["step"], r["n"]) for r in runs) == [
        ("order-42", "first", 1),
        ("order-42", "second", 1),
        ("order-42", "third", 1),
        ("order-43", "first", 1),
        ("order-43", "second", 1),
        ("order-43", "third", 1),
    ], "each id ran once"
