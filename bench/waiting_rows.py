"""Waiting workflows made in SQL: the rows a worker leaves behind when bodies suspend.

Each row is what ``bench.app.parked`` leaves after it suspended (checked against
rows a real worker wrote): status ``waiting``, no lease, ``attempts`` 0, a
succeeded ``bench.app.mark`` step 0 and a ``waiting`` step 1. Even-numbered
rows sleep (``waiting_for`` ``sleep``, ``run_at`` = their deadline, spread
over one to two days from now, the step output holding the deadline); odd
ones wait on ``recv("never")`` with no timeout (``run_at`` 9999-12-31). None
of them is due while a benchmark runs, so none is ever claimed: they only sit
in the table and its indexes.

The history beside them matters: PostgreSQL estimates the waiting rows whose
deadline has passed (``status = 'waiting' AND run_at <= now()``) from the two
columns' statistics taken apart, and settled rows all have a ``run_at`` in the
past. With 100,000 settled rows beside 100,000 waiting ones it expects some
50,000 of them to be due (there are none), and that moves the plan cache of the
claim statement (see ``claim_waiting``).
"""

from __future__ import annotations

import asyncpg

_WORKFLOWS = """
INSERT INTO workflows (id, name, status, input, attempts, max_attempts, run_at, waiting_for,
                       created_at, updated_at)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000003', 'bench.app.parked',
       'waiting',
       CASE WHEN g % 2 = 0 THEN '{"args":[86400.0],"kwargs":{}}'
            ELSE '{"args":[null],"kwargs":{}}' END,
       0, 3,
       CASE WHEN g % 2 = 0 THEN now() + interval '1 day' + g * interval '1 second'
            ELSE timestamptz '9999-12-31 00:00:00+00' END,
       CASE WHEN g % 2 = 0 THEN 'sleep' ELSE 'message:never' END,
       now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(1, $1::int) AS g
"""

_STEPS = """
INSERT INTO workflow_steps (workflow_id, step_index, step_name, status, input, output,
                            attempts, started_at, completed_at)
SELECT w.id, 0, 'bench.app.mark', 'succeeded', '{"args":[],"kwargs":{}}', '"ok"', 1,
       w.created_at, w.created_at
FROM workflows AS w WHERE w.status = 'waiting'
UNION ALL
SELECT w.id, 1,
       CASE WHEN w.waiting_for = 'sleep' THEN 'durable.sleep' ELSE 'durable.recv' END,
       'waiting',
       CASE WHEN w.waiting_for = 'sleep' THEN '86400.0' ELSE '["never"]' END,
       CASE WHEN w.waiting_for = 'sleep' THEN to_json(w.run_at)::text ELSE 'null' END,
       1, w.created_at, NULL
FROM workflows AS w WHERE w.status = 'waiting'
"""


_HISTORY = """
INSERT INTO workflows (id, name, status, input, output, attempts, max_attempts, run_at,
                       created_at, updated_at, completed_at)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000004', 'bench.app.one_step',
       'succeeded', '{"args":[],"kwargs":{}}', '"ok"', 1, 3, t, t, t, t
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT now() - interval '2 days' + g * interval '10 ms') AS at(t)
"""


async def add_history(conn: asyncpg.Connection, count: int) -> None:
    """Insert ``count`` succeeded ``bench.app.one_step`` workflows, settled in the past
    (no step rows): a table's history, whose ``run_at`` values all lie behind ``now()``."""
    if count > 0:
        await conn.execute(_HISTORY, count)


async def add_waiting(conn: asyncpg.Connection, count: int) -> None:
    """Insert ``count`` waiting workflows (and their two steps each); none may exist yet."""
    if count <= 0:
        return
    async with conn.transaction():
        await conn.execute(_WORKFLOWS, count)
        await conn.execute(_STEPS)


async def drop_waiting(conn: asyncpg.Connection) -> None:
    """Delete every waiting workflow (its steps go with it, ``ON DELETE CASCADE``)."""
    await conn.execute("DELETE FROM workflows WHERE status = 'waiting'")


async def settle_tables(conn: asyncpg.Connection, *, checkpoint: bool = False) -> None:
    """``VACUUM ANALYZE`` the durable tables: dead rows gone, statistics current, and no
    autovacuum set off by a bulk insert during the measurement that follows. With
    ``checkpoint``, a ``CHECKPOINT`` too, so that the bulk insert's dirty pages are not
    written out during it."""
    await conn.execute("VACUUM ANALYZE workflows, workflow_steps, workflow_messages")
    if checkpoint:
        await conn.execute("CHECKPOINT")


async def count_waiting(conn: asyncpg.Connection) -> int:
    """How many workflows wait now."""
    count: int = await conn.fetchval("SELECT count(*) FROM workflows WHERE status = 'waiting'")
    return count
