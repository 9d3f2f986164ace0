"""The minimal-schema ceiling: the group-commit floor on the fewest tables and indexes.

Two tables, ``workflows`` and ``workflow_steps``, each with its primary key, and one
secondary index, the one a claim needs (``status, run_at``): no attempt history, no
foreign keys, no other index. Its worker is :mod:`bench.group_floor`'s (one flusher,
one statement per flush, every write fenced by its lease) with a flush that records no
attempt row. What it drains per second is what PostgreSQL can commit of three-step
workflows on this machine: the ceiling durable-core is measured against
(``python -m bench --only ceiling``). Run as ``python -m bench.ceiling_floor``, on a
database of its own (:func:`ceiling_url`) whose tables :data:`SCHEMA` makes.
"""

from __future__ import annotations

import functools

from bench import group_floor, serving

SCHEMA = """
DROP TABLE IF EXISTS workflow_steps;
DROP TABLE IF EXISTS workflows;
CREATE TABLE workflows (
    id text PRIMARY KEY,
    name text NOT NULL,
    status text NOT NULL,
    input text,
    output text,
    error text,
    attempts integer NOT NULL DEFAULT 0,
    locked_by text,
    lock_token text,
    locked_until timestamptz,
    run_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    completed_at timestamptz
);
CREATE INDEX ceiling_claim ON workflows (status, run_at);
CREATE TABLE workflow_steps (
    workflow_id text NOT NULL,
    step_index integer NOT NULL,
    step_name text NOT NULL,
    status text NOT NULL,
    input text,
    output text,
    error text,
    attempts integer NOT NULL DEFAULT 1,
    started_at timestamptz,
    completed_at timestamptz,
    PRIMARY KEY (workflow_id, step_index)
);
"""
"""The two tables (dropped first): the minimal schema."""

ENQUEUE = """
WITH added AS (
    INSERT INTO workflows (id, name, status, input)
    SELECT 'ceiling-' || n, 'bench.app.three_steps', 'pending', '{"args":[' || n || '],"kwargs":{}}'
    FROM generate_series(1, $1) AS n
    RETURNING 1
)
SELECT count(*), pg_notify('durable_workflows', '') FROM added
"""
"""Enqueue ``$1`` three-step workflows in one statement, waking the idle worker."""

FLUSH = """
WITH stepped AS (
    INSERT INTO workflow_steps
        (workflow_id, step_index, step_name, status, input, output, attempts, started_at,
         completed_at)
    SELECT w.id, u.step_index, u.step_name, 'succeeded', u.input, u.output, 1, now(), now()
    FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[])
        AS u(id, token, step_index, step_name, input, output)
    JOIN workflows AS w ON w.id = u.id AND w.lock_token = u.token
    ON CONFLICT (workflow_id, step_index) DO UPDATE
    SET step_name = excluded.step_name, status = excluded.status, input = excluded.input,
        output = excluded.output, error = NULL, attempts = workflow_steps.attempts + 1,
        started_at = excluded.started_at, completed_at = excluded.completed_at
    RETURNING workflow_steps.workflow_id
), settled AS (
    UPDATE workflows AS w
    SET status = 'succeeded', output = u.output, error = NULL, locked_by = NULL,
        lock_token = NULL, locked_until = NULL, updated_at = now(), completed_at = now()
    FROM unnest($7::text[], $8::text[], $9::text[]) AS u(id, token, output)
    WHERE w.id = u.id AND w.lock_token = u.token
    RETURNING w.id
)
SELECT (SELECT array_agg(workflow_id) FROM stepped) AS stepped,
       (SELECT array_agg(id) FROM settled) AS settled
"""
"""The group floor's flush (:data:`bench.own_sql.FLUSH`) without the attempt's history row."""


def ceiling_url(url: str) -> str:
    """The ceiling's database beside the bench's: ``<database>_ceiling``."""
    base, _, query = url.partition("?")
    return base + "_ceiling" + (f"?{query}" if query else "")


def main() -> None:
    """``python -m bench.ceiling_floor``: a minimal-schema ceiling worker process."""
    serving.floor_main(
        "bench.ceiling_floor",
        functools.partial(group_floor.run_worker, flush=FLUSH, attempts=False, name="ceiling"),
    )


if __name__ == "__main__":
    main()
