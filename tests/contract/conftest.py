"""Fixtures for running the contract suite against the real databases."""

from __future__ import annotations

import os

import pytest

from durable_core import schema
from durable_core.errors import StoreUnavailableError
from durable_mysql import MySQLStore, ensure_database

MYSQL_URL = os.environ.get("DURABLE_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/durable_test")


@pytest.fixture(scope="session")
async def mysql_url() -> str:
    """The MariaDB/MySQL test database, created and given a fresh schema once per session.

    An unreachable server fails the run; it is never skipped.
    """
    try:
        await ensure_database(MYSQL_URL)
    except StoreUnavailableError as exc:
        pytest.fail(f"MariaDB/MySQL is required at {MYSQL_URL} and cannot be reached: {exc}")
    store = MySQLStore(MYSQL_URL)
    await store.open()
    try:
        await schema.drop_schema(store.engine)
        await store.apply_schema()
    finally:
        await store.close()
    return MYSQL_URL
