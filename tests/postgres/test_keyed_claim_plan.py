"""The keyed claim's plan: a hot key's backlog (and history) is never walked to reach the
other keys' rows; each key is an index probe of ``ix_workflows_keyed`` (issue 22)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from durable_core.definitions.queues import Queue, RateLimit, Route
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from durable_postgres.connector import compile_statement
from durable_postgres.dialect import PostgresStatements

pytestmark = pytest.mark.anyio


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to the test database, schema applied, tables emptied."""
    async with PostgresStore(postgres_url) as store:
        await store.apply_schema()
    conn = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f"TRUNCATE {WORKFLOW_TABLES}")
        yield conn
    finally:
        await conn.close()


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


def insert(status: str, key: str, count: int, extra: str = "") -> str:
    """Rows of ``fair.job`` in queue ``fair`` under ``key``."""
    return (
        "INSERT INTO workflows (id, name, status, input, max_attempts, queue, concurrency_key, "
        "run_at, created_at, updated_at, started_at, completed_at) SELECT "
        f"gen_random_uuid()::text, 'fair.job', '{status}', '[]', 3, 'fair', {key}, "
        f"now() - g * interval '1 ms', now(), now(), {extra or 'NULL, NULL'} "
        f"FROM generate_series(1, {count}) g"
    )


async def test_the_keyed_claim_probes_each_key_and_never_walks_a_hot_backlog(
    db: asyncpg.Connection,
) -> None:
    await db.execute(insert("pending", "'hot'", 20000))
    # The hot key's history: what its rate window is counted against.
    finished = "now() - interval '1 hour', now() - interval '1 hour'"
    await db.execute(insert("succeeded", "'hot'", 20000, finished))
    await db.execute(insert("pending", "'cold-' || g", 50))
    await db.execute("ANALYZE workflows")
    statements = PostgresStatements()
    queue = Queue("fair", key_concurrency=2, key_rate_limit=RateLimit(100, period=60))
    # A lane with no row (its probe finds no key at once) beside the one with them.
    routes = [Route(queue, ("fair.empty", "fair.job"), 8)]
    transaction = db.transaction()
    await transaction.start()
    try:
        claim = compile_statement(statements.claim)
        params = {"worker": "w", "limit": 8, "lease_seconds": 30.0}
        args = claim.args({**params, **statements.claim_params(routes)})
        raw = await db.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {claim.sql}", *args)
        claimed = await db.fetch("SELECT concurrency_key FROM workflows WHERE status = 'running'")
    finally:
        await transaction.rollback()
    nodes = plan_nodes(json.loads(raw)[0]["Plan"])
    assert "Seq Scan" not in [node["Node Type"] for node in nodes]
    by_index: dict[str, int] = {}
    for node in nodes:
        if "Index Name" in node:
            rows = node["Actual Rows"] * node["Actual Loops"]
            by_index[node["Index Name"]] = by_index.get(node["Index Name"], 0) + rows
    assert "ix_workflows_keyed" in by_index
    # Each key is a probe and at most two rows: far from the hot key's 20,000 (or its
    # 20,000 finished rows, which only the rate's count by queue and start time skips).
    assert max(by_index.values()) <= 1000, by_index
    # Eight rows, the hot key at its limit of two, the others one key each.
    keys = [row["concurrency_key"] for row in claimed]
    assert len(keys) == 8 and keys.count("hot") <= 2
