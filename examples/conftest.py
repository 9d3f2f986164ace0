"""This repository's own runs of the examples' tests.

A user gives the worker tests a database with ``--durable-postgres-url`` or
``DURABLE_POSTGRES_URL``. Without either, this repository's runs use a
database of their own beside ``DURABLE_TEST_POSTGRES_URL``'s (as ``make test``
expects), created afresh; an unreachable server fails the test.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import anyio
import pytest

from durable_core.pytest_plugin import POSTGRES_URL_ENV
from tests.conftest import POSTGRES_URL as TEST_POSTGRES_URL


@pytest.fixture(scope="session")
def durable_postgres_url(pytestconfig: pytest.Config) -> str:
    given: str | None = pytestconfig.getoption("durable_postgres_url") or os.environ.get(
        POSTGRES_URL_ENV
    )
    if given:
        return given
    from tests.conftest import fresh_postgres_database

    name = TEST_POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0] + "_examples"
    # In a thread of its own: an async session fixture of tests/ may hold this thread's loop.
    with ThreadPoolExecutor(max_workers=1) as thread:
        made = thread.submit(anyio.run, partial(fresh_postgres_database, TEST_POSTGRES_URL, name))
    try:
        return made.result()
    except OSError as exc:
        pytest.fail(f"PostgreSQL is required at {TEST_POSTGRES_URL}: {exc}", pytrace=False)
