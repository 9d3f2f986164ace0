"""The ``durable`` command: run a worker, apply the schema, inspect and steer workflows.

Each module adds its commands: :mod:`.running` (worker, start, migrate, alembic,
dashboard), :mod:`.inspecting` (list, stats, show, retry, cancel, erase, send, fork),
:mod:`.pruning` (prune), :mod:`.schedules` and :mod:`.replaying` (export, replay-check);
:mod:`.common` holds what they share.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

import anyio

from .. import __version__
from ..codec.encryption import configure_from_env
from ..errors import FrameworkError
from ..runtime.worker import single_error
from . import inspecting, pruning, replaying, running, schedules
from .common import (
    LOG_FORMAT_ENV,
    LOG_LEVEL_ENV,
    LOG_LEVELS,
    configure_logging,
    import_app,
    opened_store,
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors (a missing argument, a bad number) are one line and
    exit 2 as every other error of the command is; ``--help`` still shows the usage."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("durable").strip()
        self.exit(2, f"durable: error: {f'{command}: ' if command else ''}{message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``durable`` command."""
    parser = _Parser(
        prog="durable", description="Durable workflows: worker, schema and operations."
    )
    parser.add_argument(
        "--log-level",
        help=f"{', '.join(LOG_LEVELS)} (default: ${LOG_LEVEL_ENV}, else INFO)",
    )
    parser.add_argument(
        "--log-format",
        help=f"text or json, one object a line (default: ${LOG_FORMAT_ENV}, else text; "
        "json needs the [logs] extra)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (running, inspecting, pruning, schedules, replaying):
        module.add_commands(commands)
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
            args = build_parser().parse_args(_valued(sys.argv[1:] if argv is None else argv))
            args.argv = None if argv is None else list(argv)  # what a supervisor runs again
            code = _main(args)
        finally:
            sys.stdout.flush()  # here, not at exit: a reader gone shows up inside the try
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        return 128 + signal.SIGPIPE
    if getattr(args, "exit_now", False):
        # A worker that abandoned its workflows exits now: the interpreter would otherwise
        # wait at exit for the thread of a (plain def) step that never ends.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    return code


_VALUED = ("--older-than",)
"""Options whose value may begin with ``-`` (``--older-than -1d``: refused by the command,
with what it takes, not read by argparse as an option of its own)."""


def _valued(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``OPTION -VALUE`` written ``OPTION=-VALUE`` for the :data:`_VALUED`."""
    joined: list[str] = []
    for word in argv:
        if joined and joined[-1] in _VALUED and word.startswith("-") and word != "--":
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def _main(args: argparse.Namespace) -> int:
    try:
        configure_logging(args.log_level, args.log_format)
        configure_from_env()  # $DURABLE_ENCRYPTION_KEYS: values are written and read encrypted
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


def _fail(exc: FrameworkError) -> int:
    """Print a :class:`FrameworkError` as one line; the exit code of every CLI error."""
    message = " ".join(str(exc).split())
    print(f"durable: error: {message}", file=sys.stderr)
    return 2


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())


__all__ = ["build_parser", "import_app", "main", "opened_store", "run"]
