"""``durable worker``, ``start``, ``migrate``, ``alembic`` and ``dashboard``."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
from collections.abc import Mapping
from typing import Any

from ..client import DurableClient
from ..config import WorkflowConfig
from ..registry import default_registry
from ..schema import SCHEMA_VERSION
from .common import APP_ENV, import_app, json_option, opened_store, with_app, with_database


def add_commands(commands: Any) -> None:
    """Add the commands that run, start and serve to the ``commands`` subparsers."""
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


async def _worker(args: argparse.Namespace) -> int:
    from ..worker import WorkflowWorker

    bootstrap = import_app(args.app, args.bootstrap)
    if bootstrap is not None:
        result = bootstrap()
        if inspect.isawaitable(result):
            await result
    default_registry.assert_no_duplicates()
    config = worker_config(args.concurrency)
    async with opened_store(args.database_url, args.embedded_dir) as store:
        if args.migrate:
            await store.apply_schema()
        worker = WorkflowWorker(store, config, worker_id=args.worker_id, queues=args.queue)
        await worker.run(handle_signals=True)
    return 1 if worker.abandoned else 0


def worker_config(
    concurrency: int | None, environ: Mapping[str, str] | None = None
) -> WorkflowConfig:
    """The ``WORKFLOW_*`` settings of ``environ`` (default: the process's), with
    ``--concurrency`` in place of ``WORKFLOW_CONCURRENCY`` when given."""
    config = WorkflowConfig.from_env(environ)
    if concurrency is not None:
        config = dataclasses.replace(config, concurrency=concurrency)
    return config


async def _start(args: argparse.Namespace) -> int:
    positional = json_option("--args", args.args, list)
    keywords = json_option("--kwargs", args.kwargs, dict)
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
    from ..migrations import versions_dir_from_ini, write_revisions

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
    from ..dashboard.serve import check_serving, serve

    check_serving(args.host, args.token, args.allowed_host)
    async with opened_store(args.database_url, args.embedded_dir) as store:
        await serve(
            store,
            host=args.host,
            port=args.port,
            token=args.token,
            allowed_hosts=args.allowed_host,
            forwarded_allow_ips=args.forwarded_allow_ips,
        )
    return 0
