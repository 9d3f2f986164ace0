"""The PostgreSQL plans of lists filtered by attributes: found through the attributes'
index, newest first, reading a page of rows, never scanning ``workflows``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from durable_core.seams.attributes import AttributeFilter, AttributeRange
from durable_core.sql.attributes import AttributeStatements, _ordered, _test
from durable_core.sql.schema import WORKFLOW_TABLES
from durable_postgres import PostgresStore
from durable_postgres.connector import compile_statement
from durable_postgres.dialect import PostgresDialect
from tests.postgres.test_postgres_store import plan_nodes
from tests.worker.conftest import plain

pytestmark = pytest.mark.anyio

ROWS = 10_000


@pytest.fixture(scope="module")
async def db(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the test database with the schema applied, ROWS workflows (made once
    for the module's tests, which only read them), each
    with a customer (half of them "common", the others one of 500) and an amount (0 to
    999), analysed."""
    async with PostgresStore(postgres_url) as store:
        await store.apply_schema()
    conn = await asyncpg.connect(plain(postgres_url))
    try:
        await conn.execute(f"TRUNCATE {WORKFLOW_TABLES}")
        await conn.execute(
            "INSERT INTO workflows (id, name, status, input, max_attempts, run_at, created_at, "
            "updated_at) SELECT 'w-' || g, CASE WHEN g % 2 = 0 THEN 'even' ELSE 'odd' END, "
            "'succeeded', '[]', 3, now(), now() - g * interval '1 s', now() "
            f"FROM generate_series(1, {ROWS}) g"
        )
        await conn.execute(
            "INSERT INTO workflow_attributes (workflow_id, name, value_text, created_at) "
            "SELECT id, 'customer', CASE WHEN name = 'even' THEN 'common' "
            "ELSE 'c-' || (substr(id, 3)::int % 500) END, created_at FROM workflows"
        )
        await conn.execute(
            "INSERT INTO workflow_attributes (workflow_id, name, value_number, created_at) "
            "SELECT id, 'amount', substr(id, 3)::int % 1000, created_at FROM workflows"
        )
        await conn.execute("ANALYZE workflows, workflow_attributes")
        yield conn
    finally:
        await conn.close()


async def explain(
    db: asyncpg.Connection, filters: dict[str, AttributeFilter], **more: Any
) -> list[dict[str, Any]]:
    """The nodes of the analysed plan of the list the store runs for ``filters`` (and the
    list filters ``more``)."""
    ordered = _ordered(filters)
    params: dict[str, Any] = {"limit": 50, **more}
    for i, (name, wanted) in enumerate(ordered):
        params[f"a{i}_name"] = name
        if isinstance(wanted, AttributeRange):
            params[f"a{i}_min"], params[f"a{i}_max"] = (
                float(wanted.min or 0),
                float(wanted.max or 0),
            )
        else:
            params[f"a{i}_value"] = wanted
    shape = tuple(_test(wanted) for _, wanted in ordered)
    query = AttributeStatements(PostgresDialect()).listed(frozenset(more), shape)
    compiled = compile_statement(query)
    # As the store runs it: one generic plan for every value of a single equality, else
    # planned for its values.
    one_value = len(filters) == 1 and not isinstance(next(iter(filters.values())), AttributeRange)
    mode = "force_generic_plan" if one_value and not more else "force_custom_plan"
    async with db.transaction():
        await db.execute(f"SET LOCAL plan_cache_mode = {mode}")
        raw = await db.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {compiled.sql}", *compiled.args(params)
        )
    return plan_nodes(json.loads(raw)[0]["Plan"])


def indexes(nodes: list[dict[str, Any]]) -> set[str]:
    """The indexes the plan reads."""
    return {node["Index Name"] for node in nodes if "Index Name" in node}


async def test_a_common_value_is_listed_through_its_index_newest_first_without_a_sort(
    db: asyncpg.Connection,
) -> None:
    nodes = await explain(db, {"customer": "common"})
    types = [node["Node Type"] for node in nodes]
    assert "Seq Scan" not in types and "Sort" not in types, types
    assert {"ix_workflow_attributes_text", "workflows_pkey"} <= indexes(nodes)
    [walk] = [n for n in nodes if n.get("Index Name") == "ix_workflow_attributes_text"]
    assert walk["Scan Direction"] == "Backward", "newest first, in the index's order"
    # A page of the value's 5,000 workflows read, not all of them.
    assert max(node["Actual Rows"] for node in nodes) == 50


async def test_a_rare_value_reads_its_rows_only(db: asyncpg.Connection) -> None:
    nodes = await explain(db, {"customer": "c-7"})
    assert "Seq Scan" not in [node["Node Type"] for node in nodes]
    assert "ix_workflow_attributes_text" in indexes(nodes)
    assert max(node["Actual Rows"] for node in nodes) <= 20, (
        "the value's 20 rows at most (one in 500)"
    )


async def test_two_filters_and_a_name_read_no_table_whole(db: asyncpg.Connection) -> None:
    nodes = await explain(db, {"customer": "c-7", "amount": AttributeRange(0, 100)}, name="odd")
    assert "Seq Scan" not in [node["Node Type"] for node in nodes]
    assert "ix_workflow_attributes_text" in indexes(nodes)
    assert max(node["Actual Rows"] for node in nodes) <= 20


async def test_a_range_alone_is_read_from_its_index(db: asyncpg.Connection) -> None:
    nodes = await explain(db, {"amount": AttributeRange(10, 12)})
    assert "Seq Scan" not in [node["Node Type"] for node in nodes]
    assert "ix_workflow_attributes_number" in indexes(nodes)
    # The range's 30 rows, not the table's.
    assert max(node["Actual Rows"] for node in nodes) <= 30


async def test_a_value_and_a_wide_range_walk_the_value_not_the_range(
    db: asyncpg.Connection,
) -> None:
    # Planned for its values: half the amounts are in the range, 20 rows have the value.
    nodes = await explain(db, {"customer": "c-7", "amount": AttributeRange(0, 500)})
    assert "Seq Scan" not in [node["Node Type"] for node in nodes]
    assert max(node["Actual Rows"] for node in nodes) <= 20
