"""``durable export`` and ``durable replay-check``: will new code replay what is in flight?"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import anyio

from ..errors import ConfigurationError
from ..runtime.replay import (
    DEADLINE,
    Divergence,
    Report,
    export,
    read_history,
    replay,
    replay_check,
)
from .common import import_app, opened_store, with_app, with_database
from .output import printable


def add_commands(commands: Any) -> None:
    """Add ``export`` and ``replay-check`` to the ``commands`` subparsers."""
    exporting = with_database(
        commands.add_parser("export", help="write a workflow's history (for replay-check)")
    )
    exporting.add_argument("workflow_id")
    exporting.add_argument("--out", help="file to write (default: standard output)")
    exporting.set_defaults(run=_export)

    check = with_app(
        with_database(
            commands.add_parser(
                "replay-check",
                help="replay workflows in flight (or exported histories) through new code; "
                "exit 1 on a divergence",
            )
        )
    )
    check.add_argument(
        "--history",
        action="append",
        default=[],
        metavar="FILE",
        help="an exported history to replay (repeatable; instead of the database)",
    )
    check.add_argument("--workflow", action="append", default=[], metavar="ID")
    check.add_argument("--name", action="append", default=[], help="only workflows of this name")
    check.add_argument("--json", action="store_true")
    check.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEADLINE,
        metavar="SECONDS",
        help=f"give up on a replay that has not ended after this long, reporting it as a "
        f"divergence (default {DEADLINE:g})",
    )
    check.set_defaults(run=_replay_check)


async def _export(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        history = await export(store, args.workflow_id)
    text = json.dumps(history.to_json(), indent=2)
    if args.out:
        await anyio.Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


async def _replay_check(args: argparse.Namespace) -> int:
    if not args.app:
        raise ConfigurationError("replay-check needs --app: the module(s) holding the new code")
    import_app(args.app, None)
    if args.history:
        report = Report()
        for path in args.history:
            found = await replay(read_history(path), deadline=args.timeout)
            report.checked += 1
            if found is not None:
                report.divergences.append(found)
    else:
        async with opened_store(args.database_url, args.embedded_dir) as store:
            report = await replay_check(
                store,
                workflow_ids=args.workflow or None,
                names=args.name or None,
                deadline=args.timeout,
            )
    if args.json:
        print(
            json.dumps(
                {
                    "checked": report.checked,
                    "divergences": [d.as_json() for d in report.divergences],
                },
                indent=2,
            )
        )
    else:
        for divergence in report.divergences:
            print(_line(divergence))
        verdict = "diverge" if report.divergences else "replay"
        print(
            f"{report.checked} workflow(s) checked; {len(report.divergences)} "
            f"{verdict}{'' if report.divergences else ' as recorded'}",
            file=sys.stderr,
        )
    return 1 if report.divergences else 0


def _positive_seconds(text: str) -> float:
    """``--timeout``'s value: a positive number of seconds (argparse reports the error)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return seconds


def _line(divergence: Divergence) -> str:
    """One divergence on one line, with nothing stored (an id, a name, a message) reaching
    the terminal with its control sequences."""
    where = "" if divergence.step_index is None else f" at index {divergence.step_index}"
    if divergence.recorded is not None:
        where += f": recorded {divergence.recorded}, new {divergence.called}"
    message = " ".join(divergence.message.split())
    line = f"{divergence.workflow_id} {divergence.workflow_name}{where}: {message}"
    return printable(line, one_line=True)
