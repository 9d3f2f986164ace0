"""What the naive and group-commit floors share: their own SQL and their claim loop.

Unlike :mod:`bench.floor`, which sends the store's own statements, these floors
are what a plain design on bare asyncpg would write: a step is recorded by one
``INSERT`` once its body has run (not a start and a completion), a batch of
rows is claimed with ``FOR UPDATE SKIP LOCKED``, and a workflow is settled by
one ``UPDATE``. They write the same rows as the framework (``workflows`` and
``workflow_steps``: statuses, lease columns, attempts, step inputs and
outputs), and every write is fenced by the lease token the claim handed out.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import asyncpg

from bench.common import plain_dsn
from bench.floor import LEASE_SECONDS, step_name

CLAIM = """
UPDATE workflows AS w
SET status = 'running', attempts = w.attempts + 1, locked_by = $1,
    lock_token = gen_random_uuid()::text, locked_until = now() + $2 * interval '1 second',
    updated_at = now(), started_at = coalesce(w.started_at, now())
FROM (
    SELECT id FROM workflows
    WHERE status = 'pending' AND run_at <= now()
    ORDER BY run_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
) AS picked
WHERE w.id = picked.id
RETURNING w.id, w.input, w.lock_token, w.attempts, now() AS claimed_at
"""
"""Claim up to ``$3`` due rows: lease them to worker ``$1`` for ``$2`` seconds."""

_STEP_CONFLICT = """
ON CONFLICT (workflow_id, step_index) DO UPDATE
SET step_name = excluded.step_name, status = excluded.status, input = excluded.input,
    output = excluded.output, error = NULL, attempts = workflow_steps.attempts + 1,
    started_at = excluded.started_at, completed_at = excluded.completed_at
"""

STEP = (
    """
INSERT INTO workflow_steps
    (workflow_id, step_index, step_name, status, input, output, attempts, started_at,
     completed_at)
SELECT id, $3, $4, 'succeeded', $5, $6, 1, now(), now()
FROM workflows WHERE id = $1 AND lock_token = $2
"""
    + _STEP_CONFLICT
)
"""One succeeded step of workflow ``$1`` under lease ``$2``: index, name, input, output."""

SETTLE = """
WITH ended AS (
    UPDATE workflows
    SET status = 'succeeded', output = $3, error = NULL, locked_by = NULL, lock_token = NULL,
        locked_until = NULL, updated_at = now(), completed_at = now()
    WHERE id = $1 AND lock_token = $2
    RETURNING id
)
INSERT INTO workflow_attempts (workflow_id, attempt, worker, started_at, ended_at, outcome)
SELECT id, $4, $5, $6, now(), 'succeeded' FROM ended
"""
"""Settle workflow ``$1`` under lease ``$2`` with output ``$3``, and record the attempt
(number ``$4``, worker ``$5``, claimed at ``$6``) in its history, as the store does."""

FLUSH = (
    """
WITH stepped AS (
    INSERT INTO workflow_steps
        (workflow_id, step_index, step_name, status, input, output, attempts, started_at,
         completed_at)
    SELECT w.id, u.step_index, u.step_name, 'succeeded', u.input, u.output, 1, now(), now()
    FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[])
        AS u(id, token, step_index, step_name, input, output)
    JOIN workflows AS w ON w.id = u.id AND w.lock_token = u.token
"""
    + _STEP_CONFLICT
    + """
    RETURNING workflow_steps.workflow_id
), settled AS (
    UPDATE workflows AS w
    SET status = 'succeeded', output = u.output, error = NULL, locked_by = NULL,
        lock_token = NULL, locked_until = NULL, updated_at = now(), completed_at = now()
    FROM unnest($7::text[], $8::text[], $9::text[]) AS u(id, token, output)
    WHERE w.id = u.id AND w.lock_token = u.token
    RETURNING w.id
), recorded AS (
    INSERT INTO workflow_attempts (workflow_id, attempt, worker, started_at, ended_at, outcome)
    SELECT u.id, u.attempt, u.worker, u.started, now(), 'succeeded'
    FROM unnest($7::text[], $10::int[], $11::text[], $12::timestamptz[])
        AS u(id, attempt, worker, started)
    JOIN settled ON settled.id = u.id
)
SELECT (SELECT array_agg(workflow_id) FROM stepped) AS stepped,
       (SELECT array_agg(id) FROM settled) AS settled
"""
)
"""The group-commit flush: every pending step row and every pending settle, one statement.

``$1..$6`` are the step rows (workflow, token, index, name, input, output), ``$7..$12``
the settles (workflow, token, output, attempt, worker, claimed at; each settle also
records the attempt); it returns the workflows whose write landed.
"""


class LeaseLost(RuntimeError):
    """A fenced write found another lease on the row."""


def step_input(n: int) -> str:
    """A step's recorded input, shaped like the framework's (``{"args":[n],"kwargs":{}}``)."""
    return json.dumps({"args": [n], "kwargs": {}}, separators=(",", ":"))


def body(index: int, n: int) -> int:
    """The three trivial step bodies of ``bench.app.three_steps``."""
    return (n + 1, n * 2, n - 3)[index % 3]


def first_argument(input_json: str) -> int:
    """The workflow's first argument, from its stored input."""
    value: int = json.loads(input_json)["args"][0]
    return value


def claim_with(
    conn: asyncpg.Connection | asyncpg.Pool,
) -> Callable[[str, int], Awaitable[list[asyncpg.Record]]]:
    """The claim, sent on ``conn``."""

    async def claim(worker_id: str, limit: int) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await conn.fetch(CLAIM, worker_id, LEASE_SECONDS, limit)
        return rows

    return claim


def dsn_of(url: str) -> str:
    """The asyncpg DSN of a bench URL."""
    return plain_dsn(url)


__all__ = [
    "CLAIM",
    "FLUSH",
    "SETTLE",
    "STEP",
    "LeaseLost",
    "body",
    "claim_with",
    "dsn_of",
    "first_argument",
    "step_input",
    "step_name",
]
