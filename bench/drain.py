"""``python -m bench.drain URL N C``: enqueue N three-step workflows of ``bench.app``, drain
them with one ``durable worker`` at concurrency C, print workflows/s from the first attempt's
start to the last attempt's end (server timestamps of ``workflow_attempts``).

Run from two checkouts (each with its own venv) against two databases, alternating, to set
one build against another on the same machine (as bench/RESULTS.md's routing section did).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg

from bench import app
from bench.common import DEV_PLUGINS
from durable_core import DurableClient
from durable_postgres import PostgresStore


async def drain(url: str, count: int, concurrency: int) -> float:
    """Workflows per second of one worker draining ``count`` workflows."""
    conn = await asyncpg.connect(url)
    try:
        async with PostgresStore(url) as store:
            await store.apply_schema()
            await conn.execute("TRUNCATE workflows CASCADE")
            await DurableClient(store).start_workflows(
                app.three_steps, [(i,) for i in range(count)]
            )
        env = {
            **os.environ,
            "DURABLE_DATABASE_URL": url,
            "WORKFLOW_CONCURRENCY": str(concurrency),
            "WORKFLOW_POLL_INTERVAL_MS": "100",
            "DURABLE_BLOCK_PLUGINS": DEV_PLUGINS,
        }
        command = [
            sys.executable,
            "-m",
            "durable_core",
            "--log-level",
            os.environ.get("DURABLE_LOG_LEVEL", "WARNING"),
            "worker",
        ]
        worker = subprocess.Popen([*command, "--app", "bench.app"], env=env)
        try:
            left = "SELECT count(*) FROM workflows WHERE status <> 'succeeded'"
            while await conn.fetchval(left) > 0:  # noqa: ASYNC110 (polls another process)
                await asyncio.sleep(0.2)
        finally:
            worker.terminate()
            worker.wait()
        span = await conn.fetchval(
            "SELECT extract(epoch FROM max(ended_at) - min(started_at)) FROM workflow_attempts"
        )
        return count / float(span)
    finally:
        await conn.close()


def main() -> None:
    url, count, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(f"{asyncio.run(drain(url, count, concurrency)):.0f} workflows/s")


if __name__ == "__main__":
    main()
