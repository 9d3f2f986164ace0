"""What every ``durable`` command shares: logging, the app's modules, the store, options."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ..backends import DATABASE_URL_ENV, database_url_from_env, store_from_url
from ..errors import ConfigurationError
from ..hooks import plugin_manager
from ..redaction import REDACTING, get_logger
from ..store import EmbeddedDatabase, Store

EMBEDDED_DIR_ENV = "DURABLE_EMBEDDED_DIR"
APP_ENV = "DURABLE_APP"

logger = get_logger("durable_core.cli")


class _WorkerFields(logging.Formatter):
    """Appends the structured fields (worker_id, workflow_id, attempts...) to each line."""

    FIELDS = ("worker_id", "workflow_id", "attempts", "max_attempts", "outcome")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = [f"{name}={getattr(record, name)}" for name in self.FIELDS if hasattr(record, name)]
        return f"{line} [{' '.join(extra)}]" if extra else line


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(REDACTING)  # every record, the libraries' too
    handler.setFormatter(_WorkerFields("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def import_app(modules: Sequence[str], bootstrap: str | None) -> Callable[[], Any] | None:
    """Import the user's workflow modules; return the bootstrap callable, if any."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigurationError(f"cannot import workflow module {name!r}: {exc}") from exc
    if bootstrap is None:
        return None
    module_name, _, attribute = bootstrap.partition(":")
    if not attribute:
        raise ConfigurationError(f"--bootstrap takes module:function, got {bootstrap!r}")
    try:
        module = importlib.import_module(module_name)
        function: Callable[[], Any] = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load bootstrap {bootstrap!r}: {exc}") from exc
    return function


@asynccontextmanager
async def opened_store(url: str | None, embedded_dir: str | None) -> AsyncIterator[Store]:
    """Open the store for ``url``; with no URL, start the embedded PostgreSQL for it."""
    url = url or database_url_from_env()
    embedded: EmbeddedDatabase | None = None
    if url is None:
        data_dir = embedded_dir or os.environ.get(EMBEDDED_DIR_ENV) or None
        embedded = plugin_manager().hook.durable_embedded_database(data_dir=data_dir)
        if embedded is None:
            raise ConfigurationError(
                f"no database URL given ({DATABASE_URL_ENV} is unset) and no embedded database "
                "is installed: pip install 'durable-core[embedded]' or set a URL"
            )
        url = await embedded.start()
        logger.info("no %s set: using the embedded PostgreSQL at %s", DATABASE_URL_ENV, url)
    store = store_from_url(url)
    try:
        await store.open()
        try:
            yield store
        finally:
            await store.close()
    finally:
        if embedded is not None:
            await embedded.stop()


def json_option(option: str, text: str, kind: type[list[Any]] | type[dict[str, Any]]) -> Any:
    """The JSON array or object an option was given."""
    what = "an array" if kind is list else "an object"
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{option} is not valid JSON ({exc}): {text[:80]!r}") from None
    if not isinstance(value, kind):
        raise ConfigurationError(f"{option} takes {what} in JSON, got {text[:80]!r}")
    return value


def with_database(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options that choose the database."""
    sub.add_argument(
        "--database-url",
        help=f"database URL (default: ${DATABASE_URL_ENV}; unset: embedded PostgreSQL)",
    )
    sub.add_argument(
        "--embedded-dir",
        help=f"data folder of the embedded PostgreSQL (default: ${EMBEDDED_DIR_ENV} "
        "or .durable/pgdata)",
    )
    return sub


def with_app(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the option that names the modules defining workflows."""
    sub.add_argument(
        "-a",
        "--app",
        action="append",
        default=[m for m in os.environ.get(APP_ENV, "").split(",") if m],
        help=f"module defining workflows (repeatable; default: ${APP_ENV}, comma-separated)",
    )
    return sub
