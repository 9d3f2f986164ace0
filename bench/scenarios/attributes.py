"""Lists filtered by searchable attributes with 1,000,000 workflows (ms per list).

The table is filled in SQL: a month of workflows, each with a ``customer`` attribute
(one of 1,000, a thousand workflows each) and an ``amount`` (0 to 9,999). A list of the
newest 50 is timed through ``client.list_workflows`` three ways: one customer's; one
customer's within an amount range; and every workflow whose amount is in a narrow
range. The floor, in the same run and interleaved call by call, is the unfiltered list
of the newest 50 (the creation-order index): a ratio near 1 says a filter costs what the
plain list does, found through the attributes' index rather than a scan.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import asyncpg

from bench.common import Figure, ScenarioResult, Settings, median, reset
from durable_core import AttributeRange, DurableClient
from durable_core.seams.attributes import AttributeFilter
from durable_postgres import PostgresStore

NAME = "attributes"
TITLE = "Lists filtered by attributes with 1,000,000 workflows (ms per list of 50)"

_WORKFLOWS = """
INSERT INTO workflows (id, name, status, input, output, attempts, max_attempts, run_at,
                       created_at, updated_at, completed_at)
SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-0000000a77e5', 'bench.attrs.flow',
       'succeeded', '{"args":[],"kwargs":{}}', '"ok"', 1, 3, t, t, t, t
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT now() - interval '30 days' + (g::float8 / $1) * interval '30 days' AS t)
         AS row
"""

_ATTRIBUTES = """
INSERT INTO workflow_attributes (workflow_id, name, value_text, value_number, created_at)
SELECT id, 'customer', 'c-' || (('x' || substr(id, 1, 8))::bit(32)::int % 1000), NULL,
       created_at
FROM workflows
UNION ALL
SELECT id, 'amount', NULL, ('x' || substr(id, 1, 8))::bit(32)::int * 7 % 10000, created_at
FROM workflows
"""


async def _ms(client: DurableClient, attributes: Mapping[str, AttributeFilter] | None) -> float:
    started = time.perf_counter()
    rows = await client.list_workflows(attributes=attributes, limit=50)
    took = (time.perf_counter() - started) * 1000
    if not rows:
        raise RuntimeError(f"the list by {attributes} found nothing")
    return took


async def run(settings: Settings, result: ScenarioResult) -> None:
    rows = settings.pick(1_000_000, 2_000)
    calls = settings.pick(200, 10)
    conn = await asyncpg.connect(settings.dsn)
    store = PostgresStore(settings.url)
    await store.open()
    client = DurableClient(store)
    cases: dict[str, dict[str, Any]] = {
        "one customer": {"customer": "c-42"},
        "one customer, an amount range": {
            "customer": "c-42",
            "amount": AttributeRange(0, 5000),
        },
        "an amount range of 0.1%": {"amount": AttributeRange(100, 109)},
    }
    try:
        await reset(conn)
        began = time.perf_counter()
        await conn.execute(_WORKFLOWS, rows)
        await conn.execute(_ATTRIBUTES)
        await conn.execute("VACUUM ANALYZE workflows, workflow_attributes")
        result.details["fill_seconds"] = round(time.perf_counter() - began, 1)
        result.details["rows"] = rows
        for case in cases.values():
            await _ms(client, case)  # warm: the plan and the pages in cache
        await _ms(client, None)
        for label, case in cases.items():
            filtered: list[float] = []
            plain: list[float] = []
            for i in range(calls):
                pair = (case, None) if i % 2 == 0 else (None, case)
                for attributes in pair:
                    took = await _ms(client, attributes)
                    (filtered if attributes else plain).append(took)
            result.add(
                Figure(
                    name=f"list of 50 by {label}, {rows:,} workflows",
                    unit="ms",
                    value=median(filtered),
                    floor=median(plain),
                    better="lower",
                    trials=filtered,
                    floor_trials=plain,
                    note="floor = the unfiltered list of the newest 50, same run",
                )
            )
    finally:
        await reset(conn)
        await store.close()
        await conn.close()
