"""Run the quick-start workflow through a real worker process.

    python -m examples.quickstart

With ``DURABLE_DATABASE_URL`` unset it starts the embedded PostgreSQL (data in
``.durable/pgdata``); otherwise it uses that database.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from durable_core import DurableClient, WorkflowStatus, open_store
from durable_core.caller.backends import DATABASE_URL_ENV, database_url_from_env
from durable_core.seams.plugins import plugin_manager
from examples.welcome import Welcome, welcome_flow


async def main() -> int:
    url = database_url_from_env()
    embedded = None
    if url is None:
        embedded = plugin_manager().hook.durable_embedded_database(data_dir=None)
        url = await embedded.start()
        print(f"embedded PostgreSQL running at {url}")
    store = await open_store(url)
    worker = None
    try:
        await store.apply_schema()
        env = {**os.environ, DATABASE_URL_ENV: url, "DURABLE_LOG_LEVEL": "WARNING"}
        worker = await anyio.open_process(
            [sys.executable, "-m", "durable_core", "worker", "--app", "examples.welcome"],
            env=env,
            stdout=None,
            stderr=None,
        )
        client = DurableClient(store)
        handle = await client.start_workflow(welcome_flow, 123)
        print(f"started workflow {handle.id}; waiting for the worker (pid {worker.pid})")
        status = await handle.wait_with_timeout(60)
        print(f"status: {status.value}")
        if status is not WorkflowStatus.SUCCEEDED:
            print(f"error: {await handle.error()}")
            return 1
        result = await handle.output(Welcome)
        print(f"output: {result!r}")
        for step in await handle.steps():
            print(
                f"  step {step.step_index} {step.step_name}: {step.status.value} -> {step.output}"
            )
        return 0
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                code = await worker.wait()
            print(f"worker stopped with exit code {code}")
        await store.close()
        if embedded is not None:
            await embedded.stop()


if __name__ == "__main__":
    sys.exit(anyio.run(main))
