"""Transaction steps across SIGKILLs of real worker processes (issue 36).

500 workflows each insert one row into an application table in a transaction step, then
run a plain step. Worker processes are SIGKILLed ten times: inside a transaction after
its insert (it must roll back), right after a commit (before the step's row reaches the
store, when that is written behind: the record must win), and at random moments. Then a
last worker drains what is left. Every workflow must succeed, and every row must be there
exactly once. Once with the application's tables in another database (``AppDatabase``),
once in the store's own.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import asyncpg
import pytest

from durable_core import DurableClient
from durable_postgres import PostgresStore
from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.worker import tx_app
from tests.worker.conftest import Workers, eventually, plain

pytestmark = pytest.mark.anyio

WORKFLOWS = 500
KILLS = ["open", "committed", "random"] * 3 + ["committed"]
"""What each of the ten SIGKILLs hits (in an order each run shuffles)."""
WORKER = {"WORKFLOW_LOCK_TIMEOUT_SECS": 2, "WORKFLOW_CONCURRENCY": 2, "TX_LINGER": 0.03}
"""Two workflows at a time, each transaction open 30 ms: the ten killed workers take some
of the work and leave the rest (at most about 60 workflows a second each)."""


async def _ddl(url: str) -> None:
    conn = await asyncpg.connect(plain(url))
    try:
        for statement in tx_app.TX_ROWS_DDL:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _rows_of(app: asyncpg.Connection, workflow_id: str) -> int:
    return int(
        await app.fetchval("SELECT count(*) FROM tx_rows WHERE workflow_id = $1", workflow_id)
    )


async def _store_row(sql: asyncpg.Connection, workflow_id: str) -> str | None:
    status: str | None = await sql.fetchval(
        "SELECT status FROM workflow_steps WHERE workflow_id = $1 AND step_name = $2",
        workflow_id,
        tx_app.insert_row.name,
    )
    return status


@pytest.mark.parametrize("place", ["app", "store"])
async def test_500_workflows_write_their_row_exactly_once_across_ten_sigkills(
    place: str,
    pg: PostgresStore,
    workers: Workers,
    sql: asyncpg.Connection,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    app_url = postgres_url
    env: dict[str, str | float] = dict(WORKER)
    if place == "app":
        app_url = await fresh_postgres_database(postgres_url, "txs_app_crash")
        env["TX_APP_DATABASE_URL"] = app_url
    await _ddl(app_url)
    app = await asyncpg.connect(plain(app_url))
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    kills = list(KILLS)
    rng.shuffle(kills)
    try:
        handles = await DurableClient(pg).start_workflows(
            tx_app.tx_flow, [(n,) for n in range(WORKFLOWS)]
        )
        outcomes: list[str] = []
        for number, kind in enumerate(kills):
            mark = tmp_path / f"kill-{number}"
            env["TX_KILL_MARK"] = str(mark)
            if kind == "random":
                await _kill_at_random(workers, sql, rng, env)
                outcomes.append("random")
                continue
            limit = rng.randint(1, 20)
            key = "TX_KILL_OPEN" if kind == "open" else "TX_KILL_COMMITTED"
            victim = workers.start(app="tests.worker.tx_app", **{**env, key: limit})
            await _exits(victim, f"the worker to kill itself ({kind}, transaction {limit})")
            assert victim.returncode == -signal.SIGKILL, workers.log(victim)[-3000:]
            killed = mark.read_text()
            rows = await _rows_of(app, killed)
            if kind == "open":  # killed inside the transaction: its insert rolled back
                assert rows == 0, f"seed {seed}: an open transaction's row survived the crash"
            else:  # killed right after the commit: the row and its record are there
                assert rows == 1
                if place == "app":
                    recorded = await app.fetchval(
                        "SELECT output FROM durable_step_outputs WHERE workflow_id = $1", killed
                    )
                    assert recorded == json.dumps(2 * await _input_of(sql, killed))
                    assert await _store_row(sql, killed) != "succeeded", (
                        "the store's row is written behind: the crash came before it"
                    )
                else:
                    assert await _store_row(sql, killed) == "succeeded", "the row is the record"
            outcomes.append(f"{kind}:{killed}")

        workers.start(
            app="tests.worker.tx_app", **{k: v for k, v in env.items() if k != "TX_KILL_MARK"}
        )

        async def drained() -> bool:
            done = await sql.fetchval("SELECT count(*) FROM workflows WHERE status = 'succeeded'")
            return bool(done == WORKFLOWS)

        await eventually(
            drained, timeout=600, what=f"{WORKFLOWS} workflows to succeed (seed {seed})"
        )
        counts = await app.fetch("SELECT workflow_id, count(*) AS n FROM tx_rows GROUP BY 1")
        assert len(counts) == WORKFLOWS, f"seed {seed}: a workflow wrote no row"
        twice = [row["workflow_id"] for row in counts if row["n"] != 1]
        assert twice == [], f"seed {seed}: rows written more than once: {twice[:5]}"
        assert {row["workflow_id"] for row in counts} == {h.id for h in handles}
        outputs = await sql.fetch("SELECT input, output FROM workflows")
        assert all(
            json.loads(row["output"]) == json.loads(row["input"])["args"][0] * 2 + 1
            for row in outputs
        )
        if place == "app":
            records = await app.fetchval("SELECT count(*) FROM durable_step_outputs")
            assert records == WORKFLOWS
        killed_ids = [o.split(":", 1)[1] for o in outcomes if ":" in o]
        for workflow_id in killed_ids:
            assert await _rows_of(app, workflow_id) == 1
        assert len(outcomes) == 10
        rows = await app.fetchval("SELECT count(*) FROM tx_rows")
        again = await sql.fetchval("SELECT count(*) FROM workflows WHERE attempts > 1")
        kinds = {kind: sum(o.startswith(kind) for o in outcomes) for kind in KILLS}
        print(
            f"\ntransaction steps across SIGKILLs ({place}, seed {seed}): {WORKFLOWS} workflows "
            f"succeeded, {rows} rows, each once; {len(outcomes)} SIGKILLs: {kinds['open']} "
            f"inside a transaction, {kinds['committed']} right after a commit, "
            f"{kinds['random']} at random; {again} workflows ran more than one attempt",
            file=sys.__stderr__,
        )
    finally:
        await app.close()
        if place == "app":
            await drop_postgres_database(app_url)


async def _input_of(sql: asyncpg.Connection, workflow_id: str) -> int:
    text = await sql.fetchval("SELECT input FROM workflows WHERE id = $1", workflow_id)
    return int(json.loads(text)["args"][0])


async def _exits(proc: subprocess.Popen[bytes], what: str) -> None:
    async def ended() -> bool:
        return proc.poll() is not None

    await eventually(ended, timeout=180, what=what)


async def _kill_at_random(
    workers: Workers, sql: asyncpg.Connection, rng: random.Random, env: dict[str, str | float]
) -> None:
    """Start a worker, let it begin work, and SIGKILL it a random moment later."""
    before = await _progress(sql)
    victim = workers.start(app="tests.worker.tx_app", **env)

    async def working() -> bool:
        return await _progress(sql) > before or victim.poll() is not None

    await eventually(working, timeout=180, what="the worker to take work")
    await anyio.sleep(rng.uniform(0.0, 0.5))
    victim.send_signal(signal.SIGKILL)
    await _exits(victim, "the killed worker to end")
    assert victim.returncode == -signal.SIGKILL, workers.log(victim)[-3000:]


async def _progress(sql: asyncpg.Connection) -> int:
    """How far the workers got: step rows and settled workflows."""
    return int(
        await sql.fetchval(
            "SELECT (SELECT count(*) FROM workflow_steps)"
            " + (SELECT count(*) FROM workflows WHERE status = 'succeeded')"
        )
    )
