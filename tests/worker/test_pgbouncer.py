"""The PostgreSQL store behind a real PgBouncer, in transaction and in session mode.

Each test starts its own pgbouncer (``tests/pgbouncer.py``) in front of the test server
and stops it when it ends. Through it: ``durable migrate``, a real worker process that
claims, sleeps durably, receives a message, is cancelled and fires a schedule, a client,
and the dashboard. A store not told of the pooler refuses in one line naming the option.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from durable_core import DurableClient, Schedule, WorkflowStatus
from durable_core.dashboard import create_app
from durable_core.errors import ConfigurationError, InvalidDatabaseURLError
from durable_postgres import PostgresStore
from tests.conftest import fresh_postgres_database, migrated_postgres_database
from tests.pgbouncer import pgbouncer
from tests.worker import pooler_app
from tests.worker.conftest import ROOT, Workers, eventually

WAIT = 120.0
"""A guard against a hang, never a bound on speed."""


def durable(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize(
    ("mode", "direct"),
    [("transaction", True), ("transaction", False), ("session", False)],
    ids=["transaction-with-direct-url", "transaction-polling", "session"],
)
async def test_a_worker_runs_everything_behind_pgbouncer(
    postgres_url: str, tmp_path: Path, mode: str, direct: bool
) -> None:
    database = await fresh_postgres_database(postgres_url, f"pgbouncer_{mode}_{int(direct)}")
    name = database.rsplit("/", 1)[1]
    options = {"durable_pooler": mode}
    if direct:
        options["durable_direct_url"] = quote(database, safe="")
    with pgbouncer(postgres_url, mode) as bouncer:
        url = bouncer.url(name, **options)
        migrated = durable("migrate", "--database-url", url)
        assert migrated.returncode == 0, migrated.stderr
        assert "schema at version" in migrated.stdout
        workers = Workers(url, tmp_path)
        store = PostgresStore(url)
        await store.open()
        sql = await asyncpg.connect(database)
        try:
            await sql.execute(pooler_app.ROWS_DDL)
            # With a direct URL, the transaction steps go through the pooler to an
            # application database (the same one); without, to the store's database.
            app_database = {"POOLER_APP_DATABASE_URL": url} if direct else {}
            proc = workers.start(app="tests.worker.pooler_app", **app_database)
            client = DurableClient(store)

            # Claimed and run, each step once.
            handles = await client.start_workflows(pooler_app.steps, [(n,) for n in range(20)])
            for n, handle in enumerate(handles):
                assert await handle.wait_with_timeout(WAIT) is WorkflowStatus.SUCCEEDED
                assert await handle.output() == n + 3
            assert await sql.fetchval(
                "SELECT count(*) FROM workflow_steps WHERE step_name LIKE '%add_one'"
            ) == 3 * len(handles)
            rows = await sql.fetch("SELECT workflow_id, n FROM pooler_rows")
            assert {row["workflow_id"]: row["n"] for row in rows} == {
                handle.id: n + 3 for n, handle in enumerate(handles)
            }, "each transaction step's row, written once"
            if direct:  # recorded in the application database's own table
                outputs = await sql.fetchval("SELECT count(*) FROM durable_step_outputs")
                assert outputs == len(handles)

            slept = await client.start_workflow(pooler_app.sleeper, 0.5)
            receiving = await client.start_workflow(pooler_app.receiver, "greeting")
            waiting = await client.start_workflow(pooler_app.receiver, "never sent")

            async def both_waiting() -> bool:
                statuses = [await h.status() for h in (receiving, waiting)]
                return all(s is WorkflowStatus.WAITING for s in statuses)

            await eventually(both_waiting, timeout=WAIT, what="both receivers to wait")
            await client.send(receiving.id, {"hello": mode}, topic="greeting")
            await client.cancel(waiting.id)
            assert await slept.wait_with_timeout(WAIT) is WorkflowStatus.SUCCEEDED
            assert await receiving.wait_with_timeout(WAIT) is WorkflowStatus.SUCCEEDED
            assert await receiving.output() == {"hello": mode}
            assert await waiting.wait_with_timeout(WAIT) is WorkflowStatus.CANCELLED

            await client.add_schedule(
                "pooler-tick", pooler_app.ticked, Schedule("* * * * * *", args=("tick",))
            )

            async def two_ticks_ran() -> bool:
                done: int = await sql.fetchval(
                    "SELECT count(*) FROM workflows WHERE name = 'pooler.ticked'"
                    " AND status = 'succeeded'"
                )
                return done >= 2

            await eventually(two_ticks_ran, timeout=WAIT, what="two ticks of the schedule")
            await client.pause_schedule("pooler-tick")

            # The dashboard over the same store.
            transport = httpx.ASGITransport(app=create_app(store))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
                for page in ("/", f"/workflows/{receiving.id}", "/queues"):
                    shown = await web.get(page)
                    assert shown.status_code == 200, page
                assert receiving.id in shown.text or page == "/queues"

            # Session state only where a session is kept.
            row = await sql.fetchrow("SELECT session_key FROM workflow_workers")
            assert row is not None
            assert (row["session_key"] is not None) == (mode == "session" or direct)
            if mode == "session":  # the store's settings, set after connecting
                assert await store.connector.pool.fetchval("SHOW enable_seqscan") == "off"
            log = workers.log(proc)
            assert "Traceback" not in log and " ERROR " not in log, log
            assert proc.poll() is None, log
        finally:
            workers.stop_all()
            await store.close()
            await sql.close()


@pytest.mark.parametrize(
    ("mode", "direct"),
    [("transaction", True), ("session", False)],
    ids=["transaction-with-direct-url", "session"],
)
async def test_a_killed_workers_workflow_is_taken_over_before_its_lease_ends(
    postgres_url: str, tmp_path: Path, mode: str, direct: bool
) -> None:
    """The liveness session (through the pooler in session mode, on the direct URL in
    transaction mode) ends with the SIGKILLed worker, and the other takes over at once."""
    database = await migrated_postgres_database(postgres_url, f"pgbouncer_kill_{mode}")
    options = {"durable_pooler": mode}
    if direct:
        options["durable_direct_url"] = quote(database, safe="")
    mark = tmp_path / "hanging"
    with pgbouncer(postgres_url, mode) as bouncer:
        url = bouncer.url(database.rsplit("/", 1)[1], **options)
        workers = Workers(url, tmp_path)
        store = PostgresStore(url)
        await store.open()
        try:
            env: dict[str, str | float] = {
                "WORKFLOW_LOCK_TIMEOUT_SECS": 300,
                "POOLER_MARK": str(mark),
            }
            victim = workers.start(app="tests.worker.pooler_app", **env)
            handle = await DurableClient(store).start_workflow(pooler_app.hangs_once)

            async def hanging() -> bool:
                return mark.exists()

            await eventually(hanging, timeout=WAIT, what="the step to hang")
            rescuer = workers.start(app="tests.worker.pooler_app", **env)

            async def rescuer_started() -> bool:
                return "started: concurrency" in workers.log(rescuer)

            await eventually(rescuer_started, timeout=WAIT, what="the rescuer to start")
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=WAIT)
            # With the lease alone this would take five minutes, more than WAIT.
            assert await handle.wait_with_timeout(WAIT) is WorkflowStatus.SUCCEEDED
            assert await handle.output() != mark.read_text(), "the other worker ran it"
            assert "is dead (its database session ended)" in workers.log(rescuer)
        finally:
            workers.stop_all()
            await store.close()


async def test_a_store_not_told_of_the_pooler_refuses_in_one_line(postgres_url: str) -> None:
    database = await migrated_postgres_database(postgres_url, "pgbouncer_refused")
    name = database.rsplit("/", 1)[1]
    with pgbouncer(postgres_url, "transaction") as bouncer:
        with pytest.raises(ConfigurationError, match=r"durable_pooler=") as refused:
            await PostgresStore(bouncer.url(name)).open()
        assert "unsupported startup parameter" in str(refused.value)
        listed = durable("list", "--database-url", bouncer.url(name))
        assert listed.returncode == 2, listed.stderr
        assert listed.stderr.count("\n") == 1 and "durable_pooler" in listed.stderr
        bad = durable("list", "--database-url", bouncer.url(name, durable_pooler="statement"))
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1
        assert "durable_pooler=statement" in bad.stderr and "pool_mode = transaction" in bad.stderr

    # A pooler told to pass the settings on still shares its server sessions: a process's
    # first named statement meets the one of the same name an earlier process left there.
    ignored = {"ignore_startup_parameters": "jit,plan_cache_mode,enable_seqscan"}
    with pgbouncer(postgres_url, "transaction", default_pool_size=1, **ignored) as bouncer:
        listed = durable("list", "--database-url", bouncer.url(name))
        assert listed.returncode == 0, listed.stderr
        shown = durable("show", "some-id", "--database-url", bouncer.url(name))
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.count("\n") == 1, shown.stderr
    assert "already exists" in shown.stderr and "durable_pooler=transaction" in shown.stderr


def test_a_transaction_pooler_refuses_session_settings_in_one_line() -> None:
    url = "postgresql://u@127.0.0.1:6432/db?durable_pooler=transaction"
    with pytest.raises(InvalidDatabaseURLError, match=r"use transaction, session or none"):
        PostgresStore(url.replace("transaction", "bogus"))
    with pytest.raises(ConfigurationError, match=r"statement_timeout .*ALTER ROLE"):
        PostgresStore(f"{url}&statement_timeout=5s")
    with pytest.raises(ConfigurationError, match=r"durable_direct_url"):
        PostgresStore(f"{url}&durable_listen=on")
    with pytest.raises(ConfigurationError, match=r"durable_direct_url"):
        PostgresStore(url, liveness=True)
    direct = quote("postgresql://u:hunter2@db.internal:5432/db", safe="")
    described = PostgresStore(f"{url}&durable_direct_url={direct}").description
    assert "hunter2" not in described and "durable_direct_url" not in described
    session = PostgresStore(url.replace("transaction", "session") + "&statement_timeout=5s")
    assert session.connector.session_settings["statement_timeout"] == "5s"
    assert "statement_timeout" not in session.connector.connect_options["server_settings"]
