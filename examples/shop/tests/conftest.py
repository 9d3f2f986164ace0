"""The shop's fixtures, on top of durable-core's pytest plugin (``durable_sqlite_store``,
``workflow_runner``, ``durable_postgres_store``, ``durable_worker``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from durable_core import Store
from examples.shop.app import create_app
from examples.shop.workflows import MAILDIR_ENV


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"  # the stores' drivers run on asyncio


@pytest.fixture
def maildir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The outbox the receipts are written to, for steps run in this process."""
    path = tmp_path / "outbox"
    monkeypatch.setenv(MAILDIR_ENV, str(path))
    return path


@pytest.fixture
def durable_worker_app() -> list[str]:
    return ["examples.shop.workflows"]


@pytest.fixture
def durable_worker_env(maildir: Path) -> dict[str, str]:
    """The same outbox for the steps the worker runs."""
    return {MAILDIR_ENV: str(maildir)}


def shop_client(store: Store) -> httpx.AsyncClient:
    """An HTTP client calling the app in this process, on ``store``."""
    transport = httpx.ASGITransport(app=create_app(store))
    return httpx.AsyncClient(transport=transport, base_url="http://shop")


@pytest.fixture
async def shop(durable_sqlite_store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The app on a fresh SQLite database; ``workflow_runner`` plays the worker."""
    async with shop_client(durable_sqlite_store) as client:
        yield client
