"""``durable list``, ``stats``, ``show``, ``retry``, ``cancel``, ``send`` and ``fork``: read
and steer workflows."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from ..caller.client import DurableClient
from ..codec.failures import load_error
from ..dashboard.present import show_arguments, show_value
from ..errors import ConfigurationError
from ..seams.attributes import Attributes, parse_filter
from ..seams.operators import unserved
from ..seams.records import (
    AttemptRecord,
    BacklogRecord,
    StepRecord,
    StepTryRecord,
    WorkflowRecord,
    WorkflowStatus,
)
from .common import opened_store, with_database
from .output import iso, printable, when


def add_commands(commands: Any) -> None:
    """Add the commands that read and steer workflows to the ``commands`` subparsers."""
    listing = with_database(commands.add_parser("list", help="list workflows, newest first"))
    listing.add_argument("--status", choices=[s.value for s in WorkflowStatus])
    listing.add_argument("--name")
    listing.add_argument("--queue", help="only the workflows of this queue")
    listing.add_argument(
        "--error", metavar="TYPE", help="only those whose error is of TYPE (builtins.ValueError)"
    )
    listing.add_argument(
        "--attr",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="only those whose attribute NAME is VALUE: text, a number, true or false, or "
        'LOW..HIGH, a range of numbers ("02139" in quotes: text); repeat for more',
    )
    listing.add_argument("--limit", type=int, default=20, help="workflows a page (default: 20)")
    listing.add_argument(
        "--before", metavar="ID", help="the page after workflow ID (the cursor a page prints)"
    )
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

    erase = with_database(
        commands.add_parser(
            "erase",
            help="erase a settled workflow's payloads (inputs, outputs, errors' texts, "
            "messages, events, streams, updates, attributes), keeping its row and history",
        )
    )
    erase.add_argument("workflow_id")
    erase.set_defaults(run=_erase)

    send = with_database(
        commands.add_parser("send", help="send a message to a workflow's recv(topic)")
    )
    send.add_argument("workflow_id")
    send.add_argument("message", help='the message, in JSON ({"paid": true}, 42, \'"text"\')')
    send.add_argument("--topic", default="", help="the topic its recv() waits on (default: none)")
    send.add_argument(
        "--idempotency-key", help="a repeated send with this key delivers nothing more"
    )
    send.set_defaults(run=_send)

    fork = with_database(
        commands.add_parser("fork", help="start a copy of a workflow that runs again from a step")
    )
    fork.add_argument("workflow_id")
    fork.add_argument(
        "--from-step",
        type=int,
        required=True,
        metavar="N",
        help="the copy replays the steps before index N and runs on from N",
    )
    fork.set_defaults(run=_fork)


async def _list(args: argparse.Namespace) -> int:
    attributes = dict(parse_filter(term) for term in args.attr)
    async with opened_store(args.database_url, args.embedded_dir) as store:
        records = await DurableClient(store).list_workflows(
            attributes=attributes or None,
            status=args.status,
            name=args.name,
            queue=args.queue,
            error_type=args.error,
            before=args.before,
            limit=args.limit + 1 if args.limit >= 1 else args.limit,
        )
    more = len(records) > args.limit
    records = records[: args.limit]
    cursor = records[-1].id if more else None
    if args.json:
        print(json.dumps([_record_json(r) for r in records], indent=2))
        if cursor is not None:
            print(f"durable: next page: --before {cursor}", file=sys.stderr)
        return 0
    print(f"{'id':36}  {'status':9}  {'attempts':8}  {'created':19}  name")
    for r in records:
        waiting = f"  (waiting for {r.wait_description})" if r.waiting_for else ""
        print(
            printable(
                f"{r.id:36}  {r.status.value:9}  {r.attempts}/{r.max_attempts:<6}  "
                f"{when(r.created_at):19}  {r.name}{waiting}",
                one_line=True,
            )
        )
    if cursor is not None:
        print(f"next page: --before {cursor}")
    return 0


async def _stats(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        client = DurableClient(store)
        rows = await client.backlog()
        missing = unserved(rows, await client.workers()) if client.has_workers else []
    lost = {(m.queue, m.name) for m in missing}
    if args.json:
        print(json.dumps([_backlog_json(row, lost) for row in rows], indent=2))
        return 0
    if not rows:
        print("nothing pending, running or waiting")
        return 0
    print(f"{'queue':16}  {'status':8}  {'count':>8}  {'oldest run_at':19}  name")
    for row in rows:
        line = (
            f"{row.queue:16}  {row.status.value:8}  {row.count:>8}  {when(row.oldest):19}  "
            f"{row.name}"
        )
        print(printable(line, one_line=True))
    for m in missing:
        print(printable(f"{m.message}: {m.pending} pending since {when(m.oldest)}", one_line=True))
    return 0


def _backlog_json(row: BacklogRecord, lost: set[tuple[str, str]]) -> dict[str, Any]:
    return {
        "queue": row.queue,
        "name": row.name,
        "status": row.status.value,
        "count": row.count,
        "oldest": iso(row.oldest),
        "unserved": row.status is WorkflowStatus.PENDING and (row.queue, row.name) in lost,
    }


def _record_json(record: Any) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "status": record.status.value,
        "attempts": record.attempts,
        "max_attempts": record.max_attempts,
        "queue": record.queue,
        "created_at": iso(record.created_at),
        "run_at": iso(record.run_at),
        "completed_at": iso(record.completed_at),
        "parent_id": record.parent_id,
        "waiting_for": record.waiting_for,
        "wake_at": iso(record.wake_at),
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
        tries: dict[int, list[StepTryRecord]] = {}
        for one in await handle.step_tries():
            tries.setdefault(one.step_index, []).append(one)
        attributes = await handle.attributes() if isinstance(store, Attributes) else {}
    if args.json:
        data = _record_json(record)
        data["attributes"] = attributes
        data["attempts"] = [
            {
                "attempt": a.attempt,
                "worker": a.worker,
                "started_at": iso(a.started_at),
                "ended_at": iso(a.ended_at),
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
                "path": s.path,
                "failed_tries": [
                    {
                        "try": t.try_number,
                        "started_at": iso(t.started_at),
                        "ended_at": iso(t.ended_at),
                        "error": load_error(t.error),
                    }
                    for t in tries.get(s.step_index, ())
                ],
            }
            for s in steps
        ]
        print(json.dumps(data, indent=2))
        return 0
    _show_text(record, attempts, steps, tries, traceback=args.traceback, attributes=attributes)
    return 0


def _show_text(
    record: WorkflowRecord,
    attempts: list[AttemptRecord],
    steps: list[StepRecord],
    tries: dict[int, list[StepTryRecord]],
    *,
    traceback: bool,
    attributes: Mapping[str, object] | None = None,
) -> None:
    """``durable show``'s text: values decoded as the dashboard shows them, and nothing
    stored reaching the terminal with its control characters."""

    def line(text: str) -> None:
        print(printable(text, one_line=True))

    line(f"workflow  {record.id}")
    line(f"name      {record.name}")
    line(f"status    {record.status.value}")
    line(f"queue     {record.queue}")
    line(f"attempts  {record.attempts}/{record.max_attempts}")
    line(f"input     {show_arguments(record.input)}")
    if record.waiting_for:
        line(f"waiting   for {record.wait_description}")
    if record.parent_id:
        line(f"parent    {record.parent_id}")
    if attributes:
        line("attributes " + ", ".join(f"{k}={v}" for k, v in attributes.items()))
    if record.output is not None:
        line(f"output    {show_value(record.output)}")
    error = load_error(record.error)
    if error:
        where = (
            f" in step {error.get('step_index')} ({error.get('step_name')})"
            if error.get("step_name")
            else ""
        )
        line(f"error     {error.get('type')}: {error.get('message')}{where}")
        if traceback and error.get("traceback"):
            print(printable(error["traceback"]))
    if attempts:
        print("attempts:")
    for a in attempts:
        failure = load_error(a.error)
        why = f"  {failure.get('type')}: {failure.get('message')}" if failure else ""
        line(
            f"  {a.attempt:>3}  {a.outcome:9}  {when(a.started_at, '%H:%M:%S', '?')}-"
            f"{when(a.ended_at, '%H:%M:%S', '?')}  {a.worker}{why}"
        )
    print("steps:")
    for s in steps:
        line(f"  {s.step_index:>3}  {s.status.value:9}  runs={s.attempts}  {s.step_name}")
        for t in tries.get(s.step_index, ()):
            failure = load_error(t.error) or {}
            kind, message = failure.get("type"), failure.get("message")
            line(
                f"         try {t.try_number:<3}  {when(t.started_at, '%H:%M:%S', '?')}-"
                f"{when(t.ended_at, '%H:%M:%S', '?')}  failed  "
                f"{f'{kind}: ' if kind else ''}{message}"
            )


async def _retry(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        await DurableClient(store).retry(args.workflow_id)
    said = f"workflow {args.workflow_id} is pending again; its succeeded steps stay cached"
    print(printable(said, one_line=True))
    return 0


async def _erase(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        count = await DurableClient(store).erase(args.workflow_id)
    said = (
        f"workflow {args.workflow_id} erased: {count} stored values replaced by tombstones; "
        "its row, status, timings and history are kept"
    )
    print(printable(said, one_line=True))
    return 0


async def _cancel(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        client = DurableClient(store)
        await client.cancel(args.workflow_id)
        status = await client.handle(args.workflow_id).status()
    if status.is_terminal:
        said = f"workflow {args.workflow_id} cancelled"
    else:  # it owes a saga's compensations: they run first
        said = f"workflow {args.workflow_id}: cancel requested; it runs its compensations first"
    print(printable(said, one_line=True))
    return 0


async def _send(args: argparse.Namespace) -> int:
    try:
        message = json.loads(args.message)
    except ValueError as exc:
        raise ConfigurationError(
            f"the message is not valid JSON ({exc}): {args.message[:80]!r} "
            """(a string is given in quotes: '"paid"')"""
        ) from None
    async with opened_store(args.database_url, args.embedded_dir) as store:
        await DurableClient(store).send(
            args.workflow_id, message, topic=args.topic, idempotency_key=args.idempotency_key
        )
    topic = f" on topic {args.topic!r}" if args.topic else ""
    print(printable(f"sent to workflow {args.workflow_id}{topic}", one_line=True))
    return 0


async def _fork(args: argparse.Namespace) -> int:
    async with opened_store(args.database_url, args.embedded_dir) as store:
        handle = await DurableClient(store).fork(args.workflow_id, from_step=args.from_step)
    print(printable(handle.id, one_line=True))
    return 0
