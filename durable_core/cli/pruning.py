"""``durable prune``: remove settled workflows, and everything that belongs to them, by age."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ..definitions.retention import SETTLED, parse_age
from ..durations import utcnow
from ..errors import ConfigurationError, RoleNotSupportedError
from ..runtime.retention import prune
from ..seams.records import WorkflowStatus
from ..seams.retention import PruneFilter, Pruning
from .common import opened_store, with_database
from .output import printable


def add_commands(commands: Any) -> None:
    """Add ``prune`` to the ``commands`` subparsers."""
    pruning = with_database(
        commands.add_parser(
            "prune",
            help="remove settled workflows that ended before an age, with their steps, "
            "attempts, messages, events, streams, updates, attributes and debounce rows",
        )
    )
    pruning.add_argument(
        "--older-than",
        required=True,
        metavar="AGE",
        help="only those that ended longer ago than AGE: 30d, 12h, 90m, 45s (w: weeks)",
    )
    pruning.add_argument(
        "--status",
        action="append",
        choices=SETTLED,
        help="only workflows that ended so (repeatable; default: all three)",
    )
    pruning.add_argument("--name", action="append", help="only this workflow (repeatable)")
    pruning.add_argument("--queue", action="append", help="only this queue's (repeatable)")
    pruning.add_argument(
        "--dry-run", action="store_true", help="count what would go, remove nothing"
    )
    pruning.add_argument(
        "--yes",
        action="store_true",
        help="confirm a prune that would remove every settled workflow there is",
    )
    pruning.add_argument(
        "--batch",
        type=int,
        default=1000,
        metavar="N",
        help="workflows removed per transaction (default: 1000)",
    )
    pruning.add_argument("--json", action="store_true", help="the counts as a JSON object")
    pruning.set_defaults(run=_prune)


async def _prune(args: argparse.Namespace) -> int:
    age = parse_age(args.older_than, "--older-than")
    if not 1 <= args.batch <= 10_000:
        raise ConfigurationError(f"--batch takes 1 to 10000 workflows, got {args.batch}")
    now = utcnow()
    statuses = tuple(WorkflowStatus(s) for s in dict.fromkeys(args.status or SETTLED))
    which = PruneFilter(
        before=now - timedelta(seconds=age),
        statuses=statuses,
        names=tuple(args.name or ()),
        queues=tuple(args.queue or ()),
    )
    async with opened_store(args.database_url, args.embedded_dir) as store:
        if not isinstance(store, Pruning):
            raise RoleNotSupportedError(
                f"{type(store).__name__} cannot prune workflows (it lacks prune_workflows)"
            )
        counted = await store.count_prunable(which)
        if args.dry_run:
            _report("would prune", counted, args.json)
            return 0
        if not args.yes and counted["workflows"]:
            every = await store.count_prunable(PruneFilter(before=now + timedelta(days=1)))
            if counted["workflows"] >= every["workflows"]:
                raise ConfigurationError(
                    f"this prune would remove every settled workflow there is "
                    f"({counted['workflows']}): see them with --dry-run, confirm with --yes"
                )
        removed: Mapping[str, int] = await prune(store, which, batch=args.batch) or {}
    _report("pruned", {name: removed.get(name, 0) for name in counted}, args.json)
    return 0


def _report(what: str, counts: Mapping[str, int], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"dry_run": what != "pruned", "removed": dict(counts)}))
        return
    rows = ", ".join(f"{name} {n}" for name, n in counts.items() if n and name != "workflows")
    said = f"{what} {counts.get('workflows', 0)} settled workflows" + (
        f" and their rows: {rows}" if rows else ""
    )
    print(printable(said, one_line=True))
