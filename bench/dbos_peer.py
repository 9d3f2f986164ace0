"""DBOS as a peer: a worker process draining three-step DBOS workflows from a DBOS queue.

``python -m bench.dbos_peer --url URL`` launches DBOS against its own PostgreSQL
database, registers the queue ``bench`` with ``worker_concurrency`` and a polling
interval, prints ``ready`` and runs until SIGTERM. The bench enqueues the backlog
with a ``DBOSClient`` (:func:`enqueue`) and reads the timestamps DBOS keeps in
``dbos.workflow_status`` (:func:`drain_span`). Needs the optional ``dbos`` package
(``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

QUEUE = "bench"
WORKFLOW = "bench_three_steps"
APP_NAME = "durable-bench"
APP_VERSION = "bench-1"
"""Fixed, so that the client's enqueues carry the version the worker serves."""


def available() -> str | None:
    """The installed dbos version, or None when the package is not importable."""
    try:
        from importlib import metadata

        import dbos  # noqa: F401
    except ImportError:
        return None
    return metadata.version("dbos")


def typed(decorator: Any) -> Callable[[F], F]:
    """A DBOS decorator, typed as what it is: it registers the function and returns it.

    (``dbos`` is in the ``bench`` extra, which ``make install`` leaves out, so mypy may not
    see its types.)"""
    return cast("Callable[[F], F]", decorator)


def peer_url(url: str) -> str:
    """The URL of DBOS's own database: the bench database's name with ``_dbos`` appended."""
    base, sep, query = url.partition("?")
    return base + "_dbos" + sep + query


def sqlalchemy_url(url: str) -> str:
    """The URL as DBOS's SQLAlchemy engine takes it (``postgresql://`` uses psycopg)."""
    return url.split("?", 1)[0]


def run_worker(url: str, *, concurrency: int, poll_ms: float) -> None:
    """Launch DBOS, register the workflow and the queue, serve until SIGTERM."""
    from dbos import DBOS

    DBOS(
        config={
            "name": APP_NAME,
            "system_database_url": sqlalchemy_url(url),
            "executor_id": f"bench-{os.getpid()}",
            "application_version": APP_VERSION,
            "log_level": "WARNING",
        }
    )

    @typed(DBOS.step(name="bench_first"))
    async def first(n: int) -> int:
        return n + 1

    @typed(DBOS.step(name="bench_second"))
    async def second(n: int) -> int:
        return n * 2

    @typed(DBOS.step(name="bench_third"))
    async def third(n: int) -> int:
        return n - 3

    @typed(DBOS.workflow(name=WORKFLOW))
    async def three_steps(n: int) -> int:
        return await third(await second(await first(n)))

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    DBOS.launch()
    DBOS.register_queue(
        QUEUE,
        worker_concurrency=concurrency,
        polling_interval_sec=poll_ms / 1000,
        on_conflict="always_update",
    )
    print("ready", flush=True)
    stopping.wait()
    DBOS.destroy()


def enqueue(url: str, count: int) -> None:
    """Enqueue ``count`` workflows on the peer's queue in one transaction (blocking), so
    the whole backlog appears at once, as the framework's one-statement enqueue does."""
    import sqlalchemy as sa
    from dbos import DBOSClient, EnqueueOptions

    engine = sa.create_engine(sqlalchemy_url(url).replace("postgresql://", "postgresql+psycopg://"))
    client = DBOSClient(system_database_url=sqlalchemy_url(url))
    options: EnqueueOptions = {
        "queue_name": QUEUE,
        "workflow_name": WORKFLOW,
        "application_name": APP_NAME,
        "app_version": APP_VERSION,
    }
    try:
        with engine.begin() as conn:
            for n in range(count):
                client.enqueue_in_transaction(conn, options, n)
    finally:
        client.destroy()
        engine.dispose()


SPAN_SQL = """
SELECT count(*) FILTER (WHERE status = 'SUCCESS') AS done,
       count(*) AS total,
       (max(completed_at) FILTER (WHERE status = 'SUCCESS')
        - min(started_at_epoch_ms)) / 1000.0 AS span
FROM dbos.workflow_status WHERE name = $1
"""
"""Settled count and drain span (first dequeue to last completion, DBOS's own clock)."""

STEPS_SQL = """
SELECT count(*) FROM dbos.operation_outputs o
JOIN dbos.workflow_status w ON w.workflow_uuid = o.workflow_uuid
WHERE w.name = $1 AND o.error IS NULL
"""

RESET_SQL = """
DO $$ BEGIN
    IF to_regclass('dbos.workflow_status') IS NOT NULL THEN  -- DBOS makes it on its first launch
        TRUNCATE dbos.workflow_status CASCADE;
    END IF;
END $$
"""


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.dbos_peer``: a DBOS worker process."""
    parser = argparse.ArgumentParser(prog="python -m bench.dbos_peer")
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--poll-ms", type=float, default=50)
    args = parser.parse_args(argv)
    run_worker(args.url, concurrency=args.concurrency, poll_ms=args.poll_ms)


if __name__ == "__main__":
    main()
