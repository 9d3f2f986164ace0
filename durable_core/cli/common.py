"""What every ``durable`` command shares: logging, the app's modules, the store, options."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ..caller.backends import DATABASE_URL_ENV, database_url_from_env, store_from_url
from ..errors import ConfigurationError, StoreUnavailableError
from ..redaction import REDACTING, get_logger, redact_tree
from ..seams.plugins import plugin_manager
from ..seams.store import EmbeddedDatabase, Store
from ..sql.reachability import reachability
from .output import printable

EMBEDDED_DIR_ENV = "DURABLE_EMBEDDED_DIR"
APP_ENV = "DURABLE_APP"
LOG_LEVEL_ENV = "DURABLE_LOG_LEVEL"
LOG_FORMAT_ENV = "DURABLE_LOG_FORMAT"
EVENT_LOOP_ENV = "DURABLE_EVENT_LOOP"
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
DEFAULT_EMBEDDED_DIR = ".durable/pgdata"

logger = get_logger("durable_core.cli")


class _WorkerFields(logging.Formatter):
    """Appends the structured fields (worker_id, workflow_id, attempts...) to each line, and
    drops the terminal control sequences a message may carry (an error's, say)."""

    FIELDS = ("worker_id", "workflow_id", "attempts", "max_attempts", "outcome")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = [f"{name}={getattr(record, name)}" for name in self.FIELDS if hasattr(record, name)]
        return printable(f"{line} [{' '.join(extra)}]" if extra else line)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")


def _chosen(given: str | None, option: str, env: str, default: str) -> tuple[str, str]:
    """The value ``given`` to ``option`` (else ``$env``'s, else ``default``), and where it
    came from."""
    if given is not None:
        return given, option
    from_env = os.environ.get(env, "").strip()
    return (from_env, f"${env}") if from_env else (default, "the default")


def configure_logging(level: str | None = None, log_format: str | None = None) -> None:
    """Log to stderr at ``level`` (else ``$DURABLE_LOG_LEVEL``, else INFO), as text lines or
    JSON objects (``log_format``, else ``$DURABLE_LOG_FORMAT``); a bad value of either is a
    :class:`ConfigurationError` naming where it came from."""
    level, level_from = _chosen(level, "--log-level", LOG_LEVEL_ENV, "INFO")
    if level.upper() not in LOG_LEVELS:
        raise ConfigurationError(
            f"{level_from} {level!r} is not a log level: one of {', '.join(LOG_LEVELS)}"
        )
    log_format, format_from = _chosen(log_format, "--log-format", LOG_FORMAT_ENV, "text")
    if log_format.lower() not in LOG_FORMATS:
        raise ConfigurationError(
            f"{format_from} {log_format!r} is not a log format: one of {', '.join(LOG_FORMATS)}"
        )
    handler = logging.StreamHandler()
    handler.addFilter(REDACTING)  # every record, the libraries' too
    if log_format.lower() == "json":
        handler.setFormatter(json_formatter())
    else:
        handler.setFormatter(_WorkerFields("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def json_formatter() -> logging.Formatter:
    """One JSON object a line: ``time``, ``level``, ``logger``, ``message``, and every field
    the record carries (``worker_id``, ``workflow_id``...), with ``exc_info`` when it has one
    (python-json-logger, the ``[logs]`` extra)."""
    try:
        from pythonjsonlogger.json import JsonFormatter
    except ModuleNotFoundError:
        raise ConfigurationError(
            "JSON logs need python-json-logger, which is not installed: "
            "pip install 'durable-core[logs]'"
        ) from None

    class RedactingJson(JsonFormatter):
        """Every text of the object redacted: the formatter writes ``exc_info`` from the
        exception itself, not from the record's redacted ``exc_text``."""

        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            return {key: redact_tree(value) for key, value in log_data.items()}

    return RedactingJson(
        ["asctime", "levelname", "name", "message"],
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
    )


def import_app(modules: Sequence[str], bootstrap: str | None) -> Callable[[], Any] | None:
    """Import the user's workflow modules; return the bootstrap callable, if any."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        _check_module_name(name, "--app")
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigurationError(f"cannot import workflow module {name!r}: {exc}") from exc
    if bootstrap is None:
        return None
    module_name, _, attribute = bootstrap.partition(":")
    if not attribute:
        raise ConfigurationError(f"--bootstrap takes module:function, got {bootstrap!r}")
    _check_module_name(module_name, "--bootstrap", f":{attribute}")
    try:
        module = importlib.import_module(module_name)
        function: Callable[[], Any] = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load bootstrap {bootstrap!r}: {exc}") from exc
    return function


def _check_module_name(name: str, option: str, suffix: str = "") -> None:
    """Refuse a file path where a module name is wanted, naming the module it means (a path
    is not imported: importing ``wf.py`` would run ``wf`` first)."""
    if not name.endswith(".py") and "/" not in name and os.sep not in name:
        return
    path = name.removesuffix(".py").strip("/" + os.sep).replace(os.sep, "/")
    meant = ".".join(part for part in path.split("/") if part not in ("", "."))
    raise ConfigurationError(
        f"{option} takes a module name, not a file: {name!r}; did you mean {option} "
        f"{meant}{suffix}? (run from the folder that holds it)"
    )


OPEN_BACKOFF_MAX = 10.0
"""The longest wait between two tries of a worker to open its store."""
_OPENING = "opening the store"


async def open_when_reachable(store: Store) -> None:
    """Open ``store``, retrying with backoff (up to :data:`OPEN_BACKOFF_MAX` seconds) while the
    database cannot be reached or refuses new connections, with one log line: a worker
    started before its database, or while the server has no connection to spare, waits
    instead of exiting (which its supervisor would answer with a restart, in a loop)."""
    import anyio

    backoff = 0.5
    while True:
        try:
            await store.open()
        except StoreUnavailableError as exc:
            reachability(store.description).lost(_OPENING, exc, session=True)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, OPEN_BACKOFF_MAX)
        else:
            reachability(store.description).reached(_OPENING)
            return


@asynccontextmanager
async def opened_store(
    url: str | None, embedded_dir: str | None, *, embedded: bool = False, wait: bool = False
) -> AsyncIterator[Store]:
    """Open the store for ``url`` (default: ``$DURABLE_DATABASE_URL``); with no URL, or with
    ``embedded``, start the embedded PostgreSQL for it. With ``wait``, wait for a database
    that cannot be reached (:func:`open_when_reachable`)."""
    url = None if embedded else url or database_url_from_env()
    database: EmbeddedDatabase | None = None
    if url is None:
        data_dir = embedded_dir or os.environ.get(EMBEDDED_DIR_ENV) or None
        database = plugin_manager().hook.durable_embedded_database(data_dir=data_dir)
        if database is None:
            raise ConfigurationError(
                f"no database URL given ({DATABASE_URL_ENV} is unset) and no embedded database "
                "is installed: pip install 'durable-core[embedded]' or set a URL"
            )
        url = await database.start()
        logger.info("no %s set: using the embedded PostgreSQL at %s", DATABASE_URL_ENV, url)
    store = store_from_url(url)
    try:
        await (open_when_reachable(store) if wait else store.open())
        try:
            yield store
        finally:
            await store.close()
    finally:
        if database is not None:
            await database.stop()


def embedded_folder(embedded_dir: str | None) -> str:
    """Where the embedded PostgreSQL keeps its data, as the user should read it."""
    return embedded_dir or os.environ.get(EMBEDDED_DIR_ENV) or DEFAULT_EMBEDDED_DIR


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
        help=f"module defining workflows (repeatable; replaces ${APP_ENV}, which is read "
        "only without it, comma-separated)",
    )
    return sub


def app_modules(args: argparse.Namespace) -> list[str]:
    """The modules ``--app`` names, or else those of ``$DURABLE_APP`` (never both)."""
    if args.app:
        return list(args.app)
    return [name.strip() for name in os.environ.get(APP_ENV, "").split(",") if name.strip()]


def event_loop_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``anyio.run``'s backend options for the event loop ``$DURABLE_EVENT_LOOP`` names:
    ``auto`` (the default) runs on uvloop when it is installed (``durable-core[uvloop]``),
    else on asyncio's own loop; ``uvloop`` requires it; ``asyncio`` never uses it."""
    env = os.environ if environ is None else environ
    chosen = (env.get(EVENT_LOOP_ENV) or "auto").strip().lower()
    if chosen not in EVENT_LOOPS:
        raise ConfigurationError(
            f"{EVENT_LOOP_ENV}={chosen!r}: use one of {', '.join(EVENT_LOOPS)}"
        )
    if chosen == "asyncio":
        return {}
    try:
        importlib.import_module("uvloop")
    except ImportError:
        if chosen == "uvloop":
            raise ConfigurationError(
                f"{EVENT_LOOP_ENV}=uvloop, but uvloop is not installed: "
                "pip install 'durable-core[uvloop]'"
            ) from None
        return {}
    return {"use_uvloop": True}
