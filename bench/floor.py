"""The floor: bare asyncpg issuing the framework's round trips with nothing around them.

:func:`run_worker` mirrors what ``WorkflowWorker`` does, statement for
statement: one claim loop that claims as many rows as there are free slots, a
task per claimed row issuing ``start_step`` + ``complete_step`` per step and a
final ``settle``, and, when a claim comes back short, a wait for ``NOTIFY`` (or
the poll interval). It runs as ``python -m bench.floor`` so that it is a
separate process exactly like a real worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import asyncpg

from bench import serving, sql
from bench.common import plain_dsn
from durable_core.caller.client import new_workflow_id
from durable_core.definitions.queues import Queue
from durable_core.runtime.config import WorkflowConfig
from durable_core.seams.records import NewWorkflow

LEASE_SECONDS = float(WorkflowConfig().lock_timeout_secs)
STEP_NAMES = ("bench.app.first", "bench.app.second", "bench.app.third")
STEP_INPUT = '{"args":[1],"kwargs":{}}'
STEP_OUTPUT = "2"


def step_name(index: int) -> str:
    """The name the framework's step at ``index`` of ``three_steps`` has."""
    return STEP_NAMES[index % len(STEP_NAMES)]


async def run_steps(
    pool: asyncpg.Pool, workflow_id: str, token: str, steps: int, sleep: float = 0.0
) -> None:
    """Record ``steps`` steps (start + complete each) and settle, fenced by ``token``.

    Each step sleeps ``sleep`` seconds between its two writes.
    """
    lease = {"workflow": workflow_id, "token": token}
    for index in range(steps):
        status = await pool.execute(
            sql.START_STEP.sql,
            *sql.positional(
                sql.START_STEP,
                **lease,
                index=index,
                step_name=step_name(index),
                input=STEP_INPUT,
                path=None,
            ),
        )
        if status.endswith(" 0"):
            raise RuntimeError(f"floor lost the lease on {workflow_id}")
        if sleep:
            await asyncio.sleep(sleep)
        status = await pool.execute(
            sql.COMPLETE_STEP.sql,
            *sql.positional(sql.COMPLETE_STEP, **lease, index=index, output_json=STEP_OUTPUT),
        )
        if status.endswith(" 0"):
            raise RuntimeError(f"floor lost the lease on {workflow_id}")
    status = await pool.execute(
        sql.SETTLE_FINAL.sql,
        *sql.positional(
            sql.SETTLE_FINAL, **lease, output_json=STEP_OUTPUT, error_json=None, outcome="succeeded"
        ),
    )
    if status.endswith(" 0"):
        raise RuntimeError(f"floor lost the lease on {workflow_id}")


def enqueue_args(count: int, name: str, input: str = STEP_INPUT) -> list[Any]:
    """The parameters of the enqueue statement (``sql.ENQUEUE.sql``) for ``count`` rows,
    built by the store's own ``enqueue_params`` (every other setting at its default, as
    for a plain ``start_workflows``)."""
    rows = [NewWorkflow(new_workflow_id(), name, input, 3) for _ in range(count)]
    [params] = sql.enqueue_params(rows)
    return sql.positional(sql.ENQUEUE, **params)


def claim_args(worker_id: str, limit: int, queue: Queue | None = None) -> list[Any]:
    """The parameters of the claim statement (``sql.CLAIM.sql``): the routes a worker running
    ``bench.app`` on ``queue`` (the default queue if none) sends."""
    return sql.positional(
        sql.claim_for(queue),
        worker=worker_id,
        limit=limit,
        lease_seconds=LEASE_SECONDS,
        **sql.claim_params(limit, queue),
    )


async def run_worker(
    url: str, *, concurrency: int, steps: int, sleep: float, poll_ms: float, listen: bool
) -> None:
    """Claim and run rows until SIGTERM, like ``durable_core worker`` with no framework."""
    dsn = plain_dsn(url)
    pool = await asyncpg.create_pool(dsn, **sql.pool_options("durable_floor"))

    async def claim(worker_id: str, limit: int) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await pool.fetch(sql.CLAIM.sql, *claim_args(worker_id, limit))
        return rows

    async def run_one(row: asyncpg.Record, worker_id: str) -> None:
        # A negative --sleep takes the seconds from the workflow's first argument.
        seconds = json.loads(row[2])["args"][0] if sleep < 0 else sleep
        await run_steps(pool, row[0], row[5], steps, seconds)

    try:
        await serving.serve(
            dsn,
            "durable_floor",
            concurrency=concurrency,
            poll_ms=poll_ms,
            claim=claim,
            run_one=run_one,
            listen=listen,
        )
    finally:
        await pool.close()


def main() -> None:
    """``python -m bench.floor``: a floor worker process."""
    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--poll-ms", type=float, default=1000)
    parser.add_argument("--no-listen", action="store_true")
    args = parser.parse_args()
    asyncio.run(
        run_worker(
            args.url,
            concurrency=args.concurrency,
            steps=args.steps,
            sleep=args.sleep,
            poll_ms=args.poll_ms,
            listen=not args.no_listen,
        )
    )


if __name__ == "__main__":
    main()
