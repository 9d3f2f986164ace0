"""Reading a store's tables with plain SQL, on any of the three backends (what a test checks
was written, or was not, whatever the store says)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from durable_core.sql.schema import metadata

_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
}


def engine_url(url: str) -> str:
    """``url`` with the async driver SQLAlchemy needs."""
    scheme, _, rest = url.partition("://")
    return f"{_DRIVERS.get(scheme.split('+')[0], scheme)}://{rest}"


async def fetch(url: str, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """The rows ``sql`` returns on the database ``url``."""
    engine = create_async_engine(engine_url(url))
    try:
        async with engine.connect() as conn:
            result = await conn.execute(sa.text(sql), params or {})
            return [tuple(row) for row in result]
    finally:
        await engine.dispose()


async def every_row(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every durable table, by table name."""
    engine = create_async_engine(engine_url(url))
    found: dict[str, list[tuple[Any, ...]]] = {}
    try:
        async with engine.connect() as conn:
            for table in metadata.sorted_tables:
                result = await conn.execute(sa.select(table))
                found[table.name] = [tuple(row) for row in result]
    finally:
        await engine.dispose()
    return found
