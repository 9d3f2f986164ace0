"""The naive floor: bare asyncpg, one statement per write, each its own transaction.

Per workflow: its share of a batched ``SKIP LOCKED`` claim, one ``INSERT`` per step
(after the step's body ran) and one settling ``UPDATE`` (which also records the
attempt in ``workflow_attempts``, as the store's settle does); the workflow's next step
starts once the previous write has committed. Run as ``python -m bench.naive_floor``,
a separate process like a real worker; the pool has the framework store's bounds.
"""

from __future__ import annotations

import asyncpg

from bench import own_sql, serving, sql

APPLICATION_NAME = "durable_floor_naive"


async def run_worker(url: str, *, concurrency: int, steps: int, poll_ms: float) -> None:
    """Claim and run rows until SIGTERM."""
    dsn = own_sql.dsn_of(url)
    pool = await asyncpg.create_pool(dsn, **sql.pool_options(APPLICATION_NAME))

    async def run_one(row: asyncpg.Record, worker_id: str) -> None:
        workflow_id, input_json, token, attempt, claimed_at = row
        n = own_sql.first_argument(input_json)
        for index in range(steps):
            output = own_sql.body(index, n)
            status = await pool.execute(
                own_sql.STEP,
                workflow_id,
                token,
                index,
                own_sql.step_name(index),
                own_sql.step_input(n),
                str(output),
            )
            if status.endswith(" 0"):
                raise own_sql.LeaseLost(workflow_id)
            n = output
        status = await pool.execute(
            own_sql.SETTLE, workflow_id, token, str(n), attempt, worker_id, claimed_at
        )
        if status.endswith(" 0"):
            raise own_sql.LeaseLost(workflow_id)

    try:
        await serving.serve(
            dsn,
            APPLICATION_NAME,
            concurrency=concurrency,
            poll_ms=poll_ms,
            claim=own_sql.claim_with(pool),
            run_one=run_one,
        )
    finally:
        await pool.close()


def main() -> None:
    """``python -m bench.naive_floor``: a naive-floor worker process."""
    serving.floor_main("bench.naive_floor", run_worker)


if __name__ == "__main__":
    main()
