"""The ``durable`` command: run a worker, apply the schema, inspect and steer workflows."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio

from .backends import DATABASE_URL_ENV, database_url_from_env, store_from_url
from .cli_schedules import Helpers
from .cli_schedules import add_commands as add_schedule_commands
from .client import DurableClient
from .config import WorkflowConfig
from .errors import ConfigurationError, FrameworkError
from .failures import load_error
from .hooks import plugin_manager
from .records import BacklogRecord, WorkflowRecord, WorkflowStatus
from .registry import default_registry
from .schema import SCHEMA_VERSION
from .store import EmbeddedDatabase, Store
from .worker import single_error

EMBEDDED_DIR_ENV = "DURABLE_EMBEDDED_DIR"
APP_ENV = "DURABLE_APP"

logger = logging.getLogger("durable_core.cli")


class _WorkerFields(logging.Formatter):
    """Appends the structured fields (worker_id, workflow_id, attempts...) to each line."""

    FIELDS = ("worker_id", "workflow_id", "attempts", "max_attempts", "outcome")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = [f"{name}={getattr(record, name)}" for name in self.FIELDS if hasattr(record, name)]
        return f"{line} [{' '.join(extra)}]" if extra else line


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
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


async def _worker(args: argparse.Namespace) -> int:
    from .worker import WorkflowWorker

    bootstrap = import_app(args.app, args.bootstrap)
    if bootstrap is not None:
        result = bootstrap()
        if inspect.isawaitable(result):
            await result
    default_registry.assert_no_duplicates()
    config = WorkflowConfig.from_env()
    if args.concurrency is not None:
        config = WorkflowConfig(
            poll_interval_ms=config.poll_interval_ms,
            concurrency=args.concurrency,
            lock_timeout_secs=config.lock_timeout_secs,
            max_attempts=config.max_attempts,
            retry_backoff_secs=config.retry_backoff_secs,
        )
    async with opened_store(args.database_url, args.embedded_dir) as store:
        if args.migrate:
            await store.apply_schema()
        worker = WorkflowWorker(store, config, worker_id=args.worker_id, queues=args.queue)
        await worker.run(handle_signals=True)
    return 1 if worker.abandoned else 0


def _json_option(option: str, text: str, kind: type[list[Any]] | type[dict[str, Any]]) -> Any:
    """The JSON array or object an option was given."""
    what = "an array" if kind is list else "an object"
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{option} is not valid JSON ({exc}): {text[:80]!r}") from None
    if not isinstance(value, kind):
        raise ConfigurationError(f"{option} takes {what} in JSON, got {text[:80]!r}")
    return value


async def _start(args: argparse.Namespace) -> int:
    positional = _json_option("--args", args.args, list)
    keywords = _json_option("--kwargs", args.kwargs, dict)
    import_app(args.app, None)
    definition = default_registry.get(args.name, importer=f"--app (or ${APP_ENV})")
    async with opened_store(args.database_url, args.embedded_dir) as store:
        client = DurableClient(store)
        if args.workflow_id is None:
            handle = await client.start_workflow(definition, *positional, **keywords)
        else:
            handle = await client.start_workflow_with_id(
                args.workflow_id, definition, *positional, **keywords
            )
    print(handle.id)
    return 0


async def _migrate(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        await store.apply_schema()
        print(f"durable schema at version {SCHEMA_VERSION} in {store.description}")
    return 0


def _alembic(args: argparse.Namespace) -> int:
    from .migrations import versions_dir_from_ini, write_revisions

    down = args.down_revision
    if args.versions_dir:
        versions = args.versions_dir
    else:
        versions, head = versions_dir_from_ini(args.config)
        down = down or head
    for path in write_revisions(versions, down_revision=down):
        print(f"wrote {path}")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        records = await DurableClient(store).list_workflows(
            status=args.status, name=args.name, limit=args.limit
        )
    if args.json:
        print(json.dumps([_record_json(r) for r in records], indent=2))
        return 0
    print(f"{'id':36}  {'status':9}  {'attempts':8}  {'created':19}  name")
    for r in records:
        created = r.created_at.strftime("%Y-%m-%d %H:%M:%S")
        waiting = f"  (waiting for {_waiting(r)})" if r.waiting_for else ""
        print(
            f"{r.id:36}  {r.status.value:9}  {r.attempts}/{r.max_attempts:<6}  {created}  "
            f"{r.name}{waiting}"
        )
    return 0


async def _stats(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        rows = await DurableClient(store).backlog()
    if args.json:
        print(json.dumps([_backlog_json(row) for row in rows], indent=2))
        return 0
    if not rows:
        print("nothing pending, running or waiting")
        return 0
    print(f"{'queue':16}  {'status':8}  {'count':>8}  {'oldest run_at':19}  name")
    for row in rows:
        oldest = row.oldest.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{row.queue:16}  {row.status.value:8}  {row.count:>8}  {oldest}  {row.name}")
    return 0


def _backlog_json(row: BacklogRecord) -> dict[str, Any]:
    return {
        "queue": row.queue,
        "name": row.name,
        "status": row.status.value,
        "count": row.count,
        "oldest": row.oldest.isoformat(),
    }


def _waiting(record: WorkflowRecord) -> str:
    """What a waiting workflow waits for, and until when."""
    until = record.wake_at
    deadline = f" until {until.strftime('%Y-%m-%d %H:%M:%S')} UTC" if until else ""
    if record.waiting_for == "sleep":
        return f"its sleep to end{deadline}"
    kind, _, key = (record.waiting_for or "").partition(":")
    if kind == "message":
        return f"a message on topic {key!r}{deadline}" if key else f"a message{deadline}"
    if kind == "child":
        return f"child workflow {key} to settle{deadline}"
    if kind == "retry":
        return f"the next try of step {key}{deadline}"
    return f"{record.waiting_for}{deadline}"


def _record_json(record: Any) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "status": record.status.value,
        "attempts": record.attempts,
        "max_attempts": record.max_attempts,
        "created_at": record.created_at.isoformat(),
        "run_at": record.run_at.isoformat(),
        "completed_at": record.completed_at.isoformat() if record.completed_at else None,
        "parent_id": record.parent_id,
        "waiting_for": record.waiting_for,
        "wake_at": record.wake_at.isoformat() if record.wake_at else None,
        "input": record.input,
        "output": record.output,
        "error": load_error(record.error),
    }


async def _show(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        client = DurableClient(store)
        record = await client.get(args.workflow_id)
        handle = client.handle(args.workflow_id)
        steps = await handle.steps()
        attempts = await handle.attempts()
    if args.json:
        data = _record_json(record)
        data["attempts"] = [
            {
                "attempt": a.attempt,
                "worker": a.worker,
                "started_at": a.started_at.isoformat() if a.started_at else None,
                "ended_at": a.ended_at.isoformat(),
                "outcome": a.outcome,
                "error": load_error(a.error),
            }
            for a in attempts
        ]
        data["steps"] = [
            {
                "index": s.step_index,
                "name": s.step_name,
                "status": s.status.value,
                "attempts": s.attempts,
                "input": s.input,
                "output": s.output,
                "error": load_error(s.error),
            }
            for s in steps
        ]
        print(json.dumps(data, indent=2))
        return 0
    print(f"workflow  {record.id}\nname      {record.name}\nstatus    {record.status.value}")
    print(f"attempts  {record.attempts}/{record.max_attempts}\ninput     {record.input}")
    if record.waiting_for:
        print(f"waiting   for {_waiting(record)}")
    if record.parent_id:
        print(f"parent    {record.parent_id}")
    if record.output is not None:
        print(f"output    {record.output}")
    error = load_error(record.error)
    if error:
        where = (
            f" in step {error.get('step_index')} ({error.get('step_name')})"
            if error.get("step_name")
            else ""
        )
        print(f"error     {error.get('type')}: {error.get('message')}{where}")
        if args.traceback and error.get("traceback"):
            print(error["traceback"])
    if attempts:
        print("attempts:")
    for a in attempts:
        started = a.started_at.strftime("%H:%M:%S") if a.started_at else "?"
        failure = load_error(a.error)
        why = f"  {failure.get('type')}: {failure.get('message')}" if failure else ""
        print(
            f"  {a.attempt:>3}  {a.outcome:9}  {started}-{a.ended_at.strftime('%H:%M:%S')}  "
            f"{a.worker}{why}"
        )
    print("steps:")
    for s in steps:
        print(f"  {s.step_index:>3}  {s.status.value:9}  runs={s.attempts}  {s.step_name}")
    return 0


async def _retry(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        await DurableClient(store).retry(args.workflow_id)
    print(f"workflow {args.workflow_id} is pending again; its succeeded steps stay cached")
    return 0


async def _cancel(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        await DurableClient(store).cancel(args.workflow_id)
    print(f"workflow {args.workflow_id} cancelled")
    return 0


async def _dashboard(args: argparse.Namespace) -> int:
    from .dashboard.serve import check_serving, serve

    check_serving(args.host, args.token)
    async with opened_store(args.database_url, args.embedded_dir) as store:
        await serve(store, host=args.host, port=args.port, token=args.token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``durable`` command."""
    parser = argparse.ArgumentParser(
        prog="durable", description="Durable workflows: worker, schema and operations."
    )
    parser.add_argument("--log-level", default=os.environ.get("DURABLE_LOG_LEVEL", "INFO"))
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    def with_database(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
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
        sub.add_argument(
            "-a",
            "--app",
            action="append",
            default=[m for m in os.environ.get(APP_ENV, "").split(",") if m],
            help=f"module defining workflows (repeatable; default: ${APP_ENV}, comma-separated)",
        )
        return sub

    worker = with_app(with_database(commands.add_parser("worker", help="claim and run workflows")))
    worker.add_argument("--bootstrap", help="module:function to call once before claiming")
    worker.add_argument("--concurrency", type=int, help="overrides WORKFLOW_CONCURRENCY")
    worker.add_argument("--worker-id", help="default: host:pid:random")
    worker.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help="a queue to serve (repeatable); default: every queue the app declares",
    )
    worker.add_argument("--migrate", action="store_true", help="apply the schema first")
    worker.set_defaults(run=_worker)

    start = with_app(with_database(commands.add_parser("start", help="start a workflow")))
    start.add_argument("name", help="the workflow's registered name (module.qualname)")
    start.add_argument("--args", default="[]", help="positional arguments, a JSON array")
    start.add_argument("--kwargs", default="{}", help="keyword arguments, a JSON object")
    start.add_argument(
        "--id", dest="workflow_id", help="the workflow id, started at most once (default: new)"
    )
    start.set_defaults(run=_start)

    migrate = with_database(
        commands.add_parser("migrate", help="create or upgrade the durable tables in place")
    )
    migrate.set_defaults(run=_migrate)

    alembic = commands.add_parser(
        "alembic", help="write the Alembic revisions your project lacks into it"
    )
    alembic.add_argument("--config", default="alembic.ini", help="your alembic.ini")
    alembic.add_argument("--versions-dir", help="write here instead of alembic.ini's versions")
    alembic.add_argument("--down-revision", help="default: the current head")
    alembic.set_defaults(run=_alembic, sync=True)

    listing = with_database(commands.add_parser("list", help="list workflows, newest first"))
    listing.add_argument("--status", choices=[s.value for s in WorkflowStatus])
    listing.add_argument("--name")
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_list)

    stats = with_database(
        commands.add_parser("stats", help="count unfinished workflows by queue, name and status")
    )
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(run=_stats)

    show = with_database(commands.add_parser("show", help="inspect one workflow and its steps"))
    show.add_argument("workflow_id")
    show.add_argument("--traceback", action="store_true")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=_show)

    retry = with_database(commands.add_parser("retry", help="run a failed workflow again"))
    retry.add_argument("workflow_id")
    retry.set_defaults(run=_retry)

    cancel = with_database(commands.add_parser("cancel", help="cancel a workflow"))
    cancel.add_argument("workflow_id")
    cancel.set_defaults(run=_cancel)

    helpers = Helpers(with_database, with_app, opened_store, import_app, _json_option, APP_ENV)
    add_schedule_commands(commands, helpers)

    dashboard = with_database(
        commands.add_parser("dashboard", help="serve the web dashboard (the [dashboard] extra)")
    )
    dashboard.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    dashboard.add_argument("--port", type=int, default=8484, help="default: 8484")
    dashboard.add_argument(
        "--token",
        default=os.environ.get("DURABLE_DASHBOARD_TOKEN") or None,
        help="needed to open it; required on any host but loopback "
        "(default: $DURABLE_DASHBOARD_TOKEN)",
    )
    dashboard.set_defaults(run=_dashboard)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``durable`` and ``python -m durable_core``.

    When the reader of stdout goes away (``durable list | head -1``), the command stops
    quietly with the exit code of a process killed by SIGPIPE (the recipe of Python's
    ``signal`` documentation; SIGPIPE itself stays ignored, so a closed socket is an
    error, not the end of a worker).
    """
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit: a reader gone shows up inside the try
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        return 128 + signal.SIGPIPE


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    try:
        if getattr(args, "sync", False):
            code: int = args.run(args)
        else:
            code = anyio.run(args.run, args)
    except FrameworkError as exc:
        return _fail(exc)
    except BaseExceptionGroup as group:
        error = single_error(group)
        if isinstance(error, FrameworkError):
            return _fail(error)
        raise
    return code


def _version() -> str:
    try:
        return version("durable-core")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _fail(exc: FrameworkError) -> int:
    """Print a :class:`FrameworkError` as one line; the exit code of every CLI error."""
    message = " ".join(str(exc).split())
    print(f"durable: error: {message}", file=sys.stderr)
    return 2


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
