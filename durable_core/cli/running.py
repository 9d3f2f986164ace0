"""``durable worker``, ``start``, ``migrate``, ``alembic`` and ``dashboard``."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..caller.backends import DATABASE_URL_ENV, database_url_from_env
from ..caller.client import DurableClient
from ..definitions.registry import default_registry
from ..errors import ConfigurationError, FrameworkError
from ..redaction import get_logger
from ..runtime.config import WorkflowConfig
from ..runtime.worker import single_error
from ..sql.base import SQLStoreBase
from ..sql.migrations import pending
from ..sql.schema import SCHEMA_VERSION
from ..sql.schema_ops import SchemaVersion
from .common import (
    APP_ENV,
    app_modules,
    embedded_folder,
    event_loop_options,
    import_app,
    json_option,
    opened_store,
    with_app,
    with_database,
)
from .supervisor import Supervised, Supervisor, child_command, process_count

logger = get_logger("durable_core.cli")

METRICS_PORT_ENV = "DURABLE_METRICS_PORT"
METRICS_HOST_ENV = "DURABLE_METRICS_HOST"


def add_commands(commands: Any) -> None:
    """Add the commands that run, start and serve to the ``commands`` subparsers."""
    worker = with_app(with_database(commands.add_parser("worker", help="claim and run workflows")))
    worker.add_argument("--bootstrap", help="module:function to call once before claiming")
    worker.add_argument("--concurrency", type=int, help="overrides WORKFLOW_CONCURRENCY")
    worker.add_argument(
        "--drain-timeout",
        type=float,
        metavar="SECONDS",
        help="after SIGTERM, how long to wait for in-flight workflows before leaving them to "
        "their lease expiry (overrides WORKFLOW_DRAIN_TIMEOUT_SECS, default 30)",
    )
    worker.add_argument("--worker-id", help="default: host:pid:random")
    worker.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help="a queue to serve (repeatable); default: every queue the app declares",
    )
    worker.add_argument("--migrate", action="store_true", help="apply the schema first")
    worker.add_argument(
        "--metrics-port",
        metavar="PORT",
        help=f"serve Prometheus metrics on http://HOST:PORT/metrics (the [metrics] extra; "
        f"default: ${METRICS_PORT_ENV}, else none)",
    )
    worker.add_argument(
        "--metrics-host",
        metavar="HOST",
        help=f"the address metrics listen on (default: ${METRICS_HOST_ENV}, else 127.0.0.1: "
        "this machine only; 0.0.0.0 serves them, unauthenticated, on every interface)",
    )
    worker.add_argument(
        "--embedded",
        action="store_true",
        help="run on the embedded PostgreSQL (local use; without it the worker needs a URL)",
    )
    worker.add_argument(
        "--processes",
        default="1",
        metavar="N|auto",
        help="worker processes on this machine, each with its own claim loop, under a "
        "supervisor that starts a dead one again and drains them all on SIGTERM "
        "(auto: one per core; default 1, no supervisor)",
    )
    worker.set_defaults(run=_worker_command, sync=True)

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
    migrate.add_argument(
        "--app-database",
        action="append",
        metavar="URL",
        help="make the record table of transaction steps in this application database "
        "(repeatable); the durable tables are then migrated only when a database URL is given "
        f"(--database-url or ${DATABASE_URL_ENV})",
    )
    migrate.add_argument(
        "--check",
        action="store_true",
        help="change nothing: exit 1 when the durable tables need migrating, 0 when they are "
        "current (for deploy pipelines: migrate before rolling a release out)",
    )
    migrate.set_defaults(run=_migrate)

    alembic = commands.add_parser(
        "alembic", help="write the Alembic revisions your project lacks into it"
    )
    alembic.add_argument("--config", default="alembic.ini", help="your alembic.ini")
    alembic.add_argument("--versions-dir", help="write here instead of alembic.ini's versions")
    alembic.add_argument("--down-revision", help="default: the current head")
    alembic.set_defaults(run=_alembic, sync=True)

    dashboard = with_database(
        commands.add_parser("dashboard", help="serve the web dashboard (the [dashboard] extra)")
    )
    dashboard.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    dashboard.add_argument("--port", type=port_number, default=8484, help="default: 8484")
    dashboard.add_argument(
        "--token",
        default=os.environ.get("DURABLE_DASHBOARD_TOKEN") or None,
        help="needed to open it, at least 16 characters; required on any host but loopback "
        "(default: $DURABLE_DASHBOARD_TOKEN)",
    )
    dashboard.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        default=[h for h in os.environ.get("DURABLE_DASHBOARD_ALLOWED_HOSTS", "").split(",") if h],
        help="a Host name it answers besides this machine's and --host (repeatable; "
        "*.example.com patterns; '*' any; needed with --host 0.0.0.0; default: "
        "$DURABLE_DASHBOARD_ALLOWED_HOSTS, comma-separated)",
    )
    dashboard.add_argument(
        "--forwarded-allow-ips",
        default=os.environ.get("DURABLE_DASHBOARD_FORWARDED_ALLOW_IPS") or None,
        metavar="IPS",
        help="trust X-Forwarded-Proto/-For from these proxy addresses (comma-separated; "
        "default: $DURABLE_DASHBOARD_FORWARDED_ALLOW_IPS; unset: trust none)",
    )
    dashboard.set_defaults(run=_dashboard)


def port_number(text: str) -> int:
    """A TCP port for argparse: 0 to 65535 (0: any free one), never wrapped around."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return number


def _worker_command(args: argparse.Namespace) -> int:
    """``durable worker``: one worker in this process, or (``--processes`` N > 1) a
    supervisor of N worker processes (:mod:`.supervisor`)."""
    supervised = Supervised.from_env()
    loop = event_loop_options()
    if supervised is not None:
        try:
            return anyio.run(_worker, args, supervised, backend_options=loop)
        except (FrameworkError, BaseExceptionGroup) as exc:
            error = single_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
            if not isinstance(error, FrameworkError):
                raise
            # Its one line goes to the supervisor, which says it (once for all processes).
            supervised.report(" ".join(str(error).split()))
            return 2
        finally:
            supervised.close()
    count = process_count(args.processes)
    if count == 1:
        return anyio.run(_worker, args, None, backend_options=loop)
    if args.embedded:
        raise ConfigurationError(
            "--embedded runs one worker process: give --database-url (or "
            f"${DATABASE_URL_ENV}) to run --processes {args.processes}"
        )
    _check_apps(args)
    _check_database(args)
    metrics = _metrics_address(args)
    if metrics is not None and metrics[1] and metrics[1] + count - 1 > 65535:
        raise ConfigurationError(
            f"--metrics-port {metrics[1]}: worker process i serves metrics on that port + i, "
            f"and {metrics[1] + count - 1} is past 65535"
        )
    return Supervisor(child_command(getattr(args, "argv", None)), count).run()


def _check_apps(args: argparse.Namespace) -> list[str]:
    apps = app_modules(args)
    if not apps:
        raise ConfigurationError(
            f"durable worker needs --app MODULE, the module defining your workflows "
            f"(repeatable; or ${APP_ENV}=a,b)"
        )
    return apps


async def _worker(args: argparse.Namespace, supervised: Supervised | None) -> int:
    from ..runtime.worker import WorkflowWorker, freeze_start_up

    apps = _check_apps(args)
    _check_database(args)
    bootstrap = import_app(apps, args.bootstrap)
    if bootstrap is not None:
        result = bootstrap()
        if inspect.isawaitable(result):
            await result
    default_registry.assert_no_duplicates()
    if not default_registry.names():
        raise ConfigurationError(
            f"{', '.join(apps)} registered no workflow: name the modules whose "
            "@workflow functions the worker runs"
        )
    config = worker_config(args.concurrency, drain_timeout=args.drain_timeout).validate()
    metrics = _metrics_address(args)
    worker_id = args.worker_id
    if supervised is not None:
        # Process i of a supervisor: its own metrics port and worker id.
        if metrics is not None and metrics[1]:
            metrics = (metrics[0], metrics[1] + supervised.index)
        if worker_id:
            worker_id = f"{worker_id}-{supervised.index}"
    url = None if args.embedded else args.database_url
    opening = opened_store(url, args.embedded_dir, embedded=args.embedded, wait=True)
    async with opening as store, closing():
        worker = WorkflowWorker(store, config, worker_id=worker_id, queues=args.queue)
        async with anyio.create_task_group() as tasks:
            if supervised is not None:
                tasks.start_soon(supervised.serve, worker)
            if args.migrate:
                await store.apply_schema()
            freeze_start_up()
            if metrics is None:
                await worker.run(handle_signals=True)
            else:
                from ..observers.metrics import metrics_endpoint

                async with metrics_endpoint(*metrics, store=store):
                    await worker.run(handle_signals=True)
            tasks.cancel_scope.cancel()
    if worker.abandoned:
        args.exit_now = True  # not after the threads of steps that never end: see main()
        return 1
    return 0


@asynccontextmanager
async def closing() -> AsyncIterator[None]:
    """Close the application databases the worker's transaction steps opened, as it stops."""
    try:
        yield
    finally:
        from ..sql.app_database import close_app_databases

        await close_app_databases()


def _metrics_address(args: argparse.Namespace) -> tuple[str, int] | None:
    """Where ``--metrics-port`` (or ``$DURABLE_METRICS_PORT``) asks for metrics, if it does;
    checked before the database is opened."""
    port: str | None = args.metrics_port
    source = "--metrics-port"
    if port is None:
        port, source = os.environ.get(METRICS_PORT_ENV, "").strip() or None, f"${METRICS_PORT_ENV}"
    if port is None:
        return None
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ConfigurationError(f"{source} {port!r} is not a port number (0 to 65535)")
    host = args.metrics_host or os.environ.get(METRICS_HOST_ENV, "").strip() or "127.0.0.1"
    import durable_core.observers.metrics  # noqa: F401 -- a missing [metrics] extra is named now

    return host, number


def _check_database(args: argparse.Namespace) -> None:
    """A worker runs on the database it is given, or on the embedded one only when asked
    (``--embedded``, which it says first thing)."""
    if args.embedded:
        if args.database_url:
            raise ConfigurationError("give --database-url or --embedded, not both")
        logger.warning(
            "durable worker --embedded: running on the embedded PostgreSQL in %s%s",
            embedded_folder(args.embedded_dir),
            f" (not ${DATABASE_URL_ENV})" if database_url_from_env() else "",
        )
    elif not (args.database_url or database_url_from_env()):
        raise ConfigurationError(
            f"durable worker needs a database: --database-url or ${DATABASE_URL_ENV} "
            "(--embedded runs it on the embedded PostgreSQL, for local use)"
        )


def worker_config(
    concurrency: int | None,
    environ: Mapping[str, str] | None = None,
    *,
    drain_timeout: float | None = None,
) -> WorkflowConfig:
    """The ``WORKFLOW_*`` settings of ``environ`` (default: the process's), with
    ``--concurrency`` and ``--drain-timeout`` in place of ``WORKFLOW_CONCURRENCY`` and
    ``WORKFLOW_DRAIN_TIMEOUT_SECS`` when given."""
    config = WorkflowConfig.from_env(environ)
    if concurrency is not None:
        config = dataclasses.replace(config, concurrency=concurrency)
    if drain_timeout is not None:
        config = dataclasses.replace(config, drain_timeout_secs=drain_timeout)
    return config


async def _start(args: argparse.Namespace) -> int:
    positional = json_option("--args", args.args, list)
    keywords = json_option("--kwargs", args.kwargs, dict)
    import_app(app_modules(args), None)
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
    from ..sql.app_database import AppDatabase

    for url in args.app_database or ():
        async with AppDatabase(url) as database:
            print(f"transaction step records ready in {database.description}")
    if args.app_database and not (args.database_url or database_url_from_env()):
        return 0
    async with opened_store(args.database_url, args.embedded_dir) as store:
        if not isinstance(store, SQLStoreBase):  # a plugin's store: its own versions
            if args.check:
                raise ConfigurationError(f"{store.description} does not tell its schema version")
            await store.apply_schema()
            print(f"durable schema ready in {store.description}")
            return 0
        found = await store.schema_version()
        waiting = pending(found)
        if args.check:
            print(migration_state(store.description, found, waiting))
            return 1 if waiting else 0
        for note in not_additive(waiting):
            print(note, file=sys.stderr)
        await store.apply_schema()
        print(f"durable schema at version {max(found, SCHEMA_VERSION)} in {store.description}")
    return 0


def not_additive(waiting: list[SchemaVersion]) -> list[str]:
    """What ``durable migrate`` says of each pending version that is not additive."""
    return [
        f"durable migrate: version {version.number} ({version.message}) is not additive: "
        "workers of earlier releases refuse to start on the migrated database, and those "
        "running may fail; stop them first"
        for version in waiting
        if not version.additive
    ]


def migration_state(description: str, found: int, waiting: list[SchemaVersion]) -> str:
    """One line on what ``durable migrate`` would do to a database at version ``found``."""
    if not waiting:
        if found > SCHEMA_VERSION:
            return (
                f"durable schema at version {found} in {description}, newer than this "
                f"release's ({SCHEMA_VERSION}): nothing to migrate"
            )
        return f"durable schema at version {found} in {description}: up to date"
    if found == 0:
        return (
            f"no durable tables in {description}: run `durable migrate` (it makes version "
            f"{SCHEMA_VERSION})"
        )
    listed = "; ".join(
        f"{v.number}: {v.message} ({'additive' if v.additive else 'NOT additive'})" for v in waiting
    )
    plural = "s" if len(waiting) > 1 else ""
    return (
        f"durable schema at version {found} in {description}: {len(waiting)} migration{plural} "
        f"pending ({listed}); run `durable migrate`"
    )


def _alembic(args: argparse.Namespace) -> int:
    from ..sql.migrations import versions_dir_from_ini, write_revisions

    down = args.down_revision
    if args.versions_dir:
        versions = args.versions_dir
    else:
        versions, head = versions_dir_from_ini(args.config)
        down = down or head
    for path in write_revisions(versions, down_revision=down):
        print(f"wrote {path}")
    return 0


async def _dashboard(args: argparse.Namespace) -> int:
    from ..dashboard.serve import check_serving, listening_socket, serve

    check_serving(args.host, args.token, args.allowed_host)
    sock = listening_socket(args.host, args.port, "the dashboard")  # before the database
    try:
        async with opened_store(args.database_url, args.embedded_dir) as store:
            await serve(
                store,
                host=args.host,
                port=args.port,
                token=args.token,
                allowed_hosts=args.allowed_host,
                forwarded_allow_ips=args.forwarded_allow_ips,
                sock=sock,
            )
    finally:
        sock.close()
    return 0
