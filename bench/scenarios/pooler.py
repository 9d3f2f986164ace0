"""What ``durable_pooler=transaction`` costs a worker, the pooler's own hop aside.

Behind a transaction pooler the store sends unnamed statements (asyncpg's
``statement_cache_size=0``: each is parsed and planned again, two round trips instead of
one) and its sessions keep the server's planner settings. The same worker drains the
same backlog of three-step workflows (:func:`bench.scenarios.e2e.drain`) connected
straight to PostgreSQL, once with its default URL (the floor) and once with
``?durable_pooler=transaction`` and a ``durable_direct_url`` (so it still listens), in
turns, in the same run. The pooler's hop itself (PgBouncer adds a process between the
worker and the server) is not in the figure.
"""

from __future__ import annotations

from urllib.parse import quote

import asyncpg

from bench.common import Figure, ScenarioResult, Settings, median
from bench.scenarios.e2e import drain
from durable_core import DurableClient
from durable_postgres import PostgresStore

NAME = "pooler"
TITLE = "A worker told it is behind a transaction pooler, against the same worker told nothing"

CONCURRENCY = 32


def pooled(settings: Settings) -> str:
    """The bench URL with the options of a store behind a transaction pooler."""
    options = f"durable_pooler=transaction&durable_direct_url={quote(settings.dsn, safe='')}"
    return f"{settings.url}{'&' if '?' in settings.url else '?'}{options}"


async def run(settings: Settings, result: ScenarioResult) -> None:
    count = settings.pick(3000, 20)
    trials = settings.pick(5, 1)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    rates: dict[str, list[float]] = {"direct": [], "pooler": []}
    cpu: dict[str, list[float]] = {"direct": [], "pooler": []}
    try:
        client = DurableClient(store)
        for trial in range(trials):
            kinds = ["direct", "pooler"] if trial % 2 == 0 else ["pooler", "direct"]
            for kind in kinds:
                measured = await drain(
                    settings,
                    conn,
                    client,
                    kind="framework",
                    processes=1,
                    concurrency=CONCURRENCY,
                    count=count,
                    url=pooled(settings) if kind == "pooler" else None,
                )
                rates[kind].append(measured.rate)
                cpu[kind].append(measured.cpu_us)
    finally:
        await store.close()
        await conn.close()
    result.add(
        Figure(
            name=f"durable_pooler=transaction, 1 worker x {CONCURRENCY}",
            unit="workflows/s",
            value=median(rates["pooler"]),
            floor=median(rates["direct"]),
            trials=rates["pooler"],
            floor_trials=rates["direct"],
            note="floor: the same worker with its default URL",
        )
    )
    result.add(
        Figure(
            name="worker CPU per workflow",
            unit="µs",
            value=median(cpu["pooler"]),
            floor=median(cpu["direct"]),
            better="lower",
            trials=cpu["pooler"],
            floor_trials=cpu["direct"],
            note="floor: the same worker with its default URL",
        )
    )
    result.details.update(count=count, trials=trials, concurrency=CONCURRENCY)
