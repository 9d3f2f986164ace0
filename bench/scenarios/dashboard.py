"""Dashboard pages with 1,000,000 workflows in the table (ms per page, over HTTP).

The table is filled in SQL: a month of history, mostly succeeded, some failed,
cancelled, pending and waiting, under ten workflow names, 5% of them in a second
queue; every sixteenth
workflow has three steps and an attempt row, every thousandth has ten children. Then the
real ``durable dashboard`` serves it in a subprocess and each page is fetched
over one kept-alive HTTP connection: the list (first page, each filter, a page
deep in the table) and a workflow's page (row, steps, attempts, children). The
floor is a static file from the same server: HTTP and the server's own cost.
Each query a page runs is shown with ``EXPLAIN (ANALYZE, BUFFERS)`` of the plan
the store gets: generic (each statement is planned once, ``force_generic_plan``),
except a filtered list, planned for its values (a rare name or status is then
found through its own index, a common one by walking the creation order).
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import asyncpg

from bench import sql
from bench.common import ROOT, Figure, ScenarioResult, Settings, median, percentile, reset
from bench.waiting_rows import settle_tables
from durable_postgres.connector import compile_statement
from durable_postgres.dialect import PostgresStatements

NAME = "dashboard"
TITLE = "Dashboard pages with 1,000,000 workflows (ms per page, over HTTP)"
TARGET_MS = 100.0

_WORKFLOWS = """
INSERT INTO workflows (id, name, status, input, output, error, attempts, max_attempts, run_at,
                       waiting_for, parent_id, created_at, updated_at, completed_at, queue)
SELECT id, CASE WHEN g % 10000 = 7 THEN 'bench.dash.rare' ELSE 'bench.dash.flow_' || (g % 10) END,
       status,
       '{"args":["order-' || g || '"],"kwargs":{}}',
       CASE WHEN status = 'succeeded' THEN '"ok"' END,
       CASE WHEN status = 'failed' THEN '{"type":"builtins.ValueError","message":"no"}' END,
       CASE WHEN status IN ('pending', 'waiting') THEN 0 ELSE 1 END, 3,
       CASE WHEN status = 'waiting' THEN timestamptz '9999-12-31 00:00:00+00' ELSE t END,
       CASE WHEN status = 'waiting' THEN 'message:never' END,
       CASE WHEN g % 1000 BETWEEN 1 AND 10 THEN lpad(to_hex(g - g % 1000), 8, '0') || $2 END,
       t, t,
       CASE WHEN status IN ('succeeded', 'failed', 'cancelled') THEN t END,
       CASE WHEN g % 20 = 1 THEN 'bench-urgent' ELSE 'default' END
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT lpad(to_hex(g), 8, '0') || $2 AS id,
                     now() - interval '30 days' + (g::float8 / $1) * interval '30 days' AS t,
                     CASE WHEN g % 100 < 90 THEN 'succeeded' WHEN g % 100 < 95 THEN 'failed'
                          WHEN g % 100 < 96 THEN 'cancelled' WHEN g % 100 < 98 THEN 'pending'
                          ELSE 'waiting' END AS status) AS row
"""

_STEPS = """
INSERT INTO workflow_steps (workflow_id, step_index, step_name, status, input, output,
                            attempts, started_at, completed_at)
SELECT w.id, s, 'bench.dash.step_' || s, 'succeeded', '{"args":[],"kwargs":{}}', '"ok"', 1,
       w.created_at + s * interval '10 ms', w.created_at + (s + 1) * interval '10 ms'
FROM workflows AS w, generate_series(0, 2) AS s
WHERE w.status = 'succeeded' AND substr(w.id, 8, 1) = '0'
"""

_ATTEMPTS = """
INSERT INTO workflow_attempts (workflow_id, attempt, worker, started_at, ended_at, outcome)
SELECT w.id, 1, 'bench', w.created_at, w.completed_at, w.status
FROM workflows AS w
WHERE w.status IN ('succeeded', 'failed') AND substr(w.id, 8, 1) = '0'
"""

DASHBOARD = [sys.executable, "-m", "durable_core", "--log-level", "WARNING", "dashboard"]
ID_SUFFIX = "-0000-7000-8000-00000000da5b"


def _id(n: int) -> str:
    return f"{n:08x}{ID_SUFFIX}"


def _list_url(filters: dict[str, Any]) -> str:
    shown = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in filters.items()}
    return "/?" + urlencode(shown) if shown else "/"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Server:
    """``durable dashboard`` in a subprocess, fetched over one kept-alive connection."""

    def __init__(self, url: str) -> None:
        self.port = _free_port()
        self.process = subprocess.Popen(
            [*DASHBOARD, "--database-url", url, "--port", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                self.get("/static/dashboard.css")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the dashboard did not start") from None
                time.sleep(0.2)

    def get(self, path: str) -> tuple[float, str]:
        """Milliseconds to fetch ``path`` (status 200 required), and the body."""
        started = time.perf_counter()
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        body = response.read().decode()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:300]}")
        return elapsed, body

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def _explain(
    conn: asyncpg.Connection, statement: Any, params: dict[str, Any], *, custom: bool = False
) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of a store statement as the store runs it: its generic
    plan, or with ``custom`` a plan for these values (a filtered list)."""
    compiled = compile_statement(statement)
    mode = "force_custom_plan" if custom else "force_generic_plan"
    await conn.execute(f"SET plan_cache_mode = {mode}")
    await conn.execute(f"PREPARE dash_q AS {compiled.sql}")
    try:
        args = compiled.args(params)
        literals = ", ".join(_literal(value) for value in args)
        call = f"dash_q({literals})" if args else "dash_q"
        rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE {call}")
    finally:
        await conn.execute("DEALLOCATE dash_q")
        await conn.execute("RESET plan_cache_mode")
    return f"-- plan_cache_mode = {mode}\n" + "\n".join(row[0] for row in rows)


def _literal(value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'"
    return "'" + str(value).replace("'", "''") + "'"


async def run(settings: Settings, result: ScenarioResult) -> None:
    rows = settings.pick(1_000_000, 20_000)
    requests = settings.pick(40, 5)
    conn = await asyncpg.connect(settings.dsn, server_settings=sql.SERVER_SETTINGS)
    try:
        await reset(conn)
        started = time.perf_counter()
        await conn.execute(_WORKFLOWS, rows, ID_SUFFIX)
        await conn.execute(_STEPS)
        await conn.execute(_ATTEMPTS)
        await conn.execute("VACUUM ANALYZE workflows, workflow_steps, workflow_attempts")
        await settle_tables(conn, checkpoint=True)
        result.details["fill_seconds"] = time.perf_counter() - started
        await _measure(settings, conn, rows, requests, result)
    finally:
        await reset(conn)
        await conn.close()


async def _measure(
    settings: Settings,
    conn: asyncpg.Connection,
    rows: int,
    requests: int,
    result: ScenarioResult,
) -> None:
    middle = rows // 2
    # A succeeded parent with steps (a multiple of 16) and children (of 1,000).
    parent = _id(16_000 * max(1, middle // 16_000))
    middle_at = await conn.fetchval("SELECT created_at FROM workflows WHERE id = $1", _id(middle))
    day = middle_at.replace(hour=0, minute=0, second=0, microsecond=0)
    next_day = day + timedelta(days=1)
    failed_deep = {"status": "failed", "name": "bench.dash.flow_3", "before": _id(middle)}
    lists: dict[str, dict[str, Any]] = {
        "list, first page": {},
        "list, status failed": {"status": "failed"},
        "list, status pending (2%)": {"status": "pending"},
        "list, status waiting (2%)": {"status": "waiting"},
        "list, one name": {"name": "bench.dash.flow_3"},
        "list, one queue (5%)": {"queue": "bench-urgent"},
        "list, one day": {"created_after": day, "created_before": next_day},
        "list, a page half-way down": {"before": _id(middle)},
        "list, failed, one name, half-way down": failed_deep,
        "list, a rare name (0.01%)": {"name": "bench.dash.rare"},
        "list, status running (none)": {"status": "running"},
    }
    sparse = {"list, a rare name (0.01%)", "list, status running (none)"}
    pages = {label: (_list_url(filters), filters) for label, filters in lists.items()}
    pages["workflow page (row, 3 steps, attempts, 10 children)"] = (f"/workflows/{parent}", {})
    server = _Server(settings.url)
    try:
        floor = [server.get("/static/dashboard.css")[0] for _ in range(requests * 2)]
        timings: dict[str, list[float]] = {}
        for label, (path, _) in pages.items():
            server.get(path)  # the first request prepares the statements
            timings[label] = [server.get(path)[0] for _ in range(requests)]
            if label in lists and label not in sparse:
                shown = server.get(path)[1].count('<tr class="row"')
                if shown != 50:
                    raise RuntimeError(f"{label}: {shown} rows on the page, not 50")
        _, body = server.get(f"/workflows/{parent}")
        if body.count('class="step succeeded"') != 3 or body.count("/workflows/0") < 10:
            raise RuntimeError("the workflow page lacks its steps or children")
    finally:
        server.stop()

    explains = await _explains(conn, pages, parent)
    floor_ms = median(floor)
    for label, times in timings.items():
        figure = result.add(
            Figure(
                name=label,
                unit="ms",
                value=median(times),
                floor=floor_ms,
                better="lower",
                trials=times,
                floor_trials=floor,
                target=f"< {TARGET_MS:g} ms",
                note=f"p95 {percentile(times, 95):.1f} ms; {requests} requests; {rows:,} rows",
            )
        )
        figure.met = percentile(times, 95) < TARGET_MS
    result.details.update({"rows": rows, "explain": explains})


async def _explains(
    conn: asyncpg.Connection, pages: dict[str, tuple[str, dict[str, Any]]], parent: str
) -> dict[str, str]:
    """The plan of every query the measured pages ran."""
    q = PostgresStatements()
    plans: dict[str, str] = {}
    for label, (_, filters) in pages.items():
        if label.startswith("workflow page"):
            continue
        params = {"limit": 51, **filters}
        if "queue" in filters:
            params["queue_name"] = params.pop("queue")
        query = q.list_workflows(frozenset(filters))
        plans[label] = await _explain(conn, query, params, custom=bool(filters))
    plans["workflow page: the row"] = await _explain(conn, q.get, {"workflow": parent})
    plans["workflow page: steps"] = await _explain(conn, q.load_steps, {"workflow": parent})
    plans["workflow page: attempts"] = await _explain(conn, q.load_attempts, {"workflow": parent})
    plans["workflow page: children"] = await _explain(
        conn,
        q.list_workflows(frozenset({"parent_id"})),
        {"parent": parent, "limit": 50},
        custom=True,
    )
    plans["queues: backlog"] = await _explain(conn, q.backlog, {})
    return plans
