"""``durable list``, ``stats``, ``show``, ``retry`` and ``cancel``: read and steer workflows."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..client import DurableClient
from ..failures import load_error
from ..operators import unserved
from ..records import BacklogRecord, StepTryRecord, WorkflowStatus
from .common import opened_store, with_database


def add_commands(commands: Any) -> None:
    """Add the commands that read and steer workflows to the ``commands`` subparsers."""
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
        waiting = f"  (waiting for {r.wait_description})" if r.waiting_for else ""
        print(
            f"{r.id:36}  {r.status.value:9}  {r.attempts}/{r.max_attempts:<6}  {created}  "
            f"{r.name}{waiting}"
        )
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
        oldest = row.oldest.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{row.queue:16}  {row.status.value:8}  {row.count:>8}  {oldest}  {row.name}")
    for m in missing:
        print(f"{m.message}: {m.pending} pending since {m.oldest:%Y-%m-%d %H:%M:%S}")
    return 0


def _backlog_json(row: BacklogRecord, lost: set[tuple[str, str]]) -> dict[str, Any]:
    return {
        "queue": row.queue,
        "name": row.name,
        "status": row.status.value,
        "count": row.count,
        "oldest": row.oldest.isoformat(),
        "unserved": row.status is WorkflowStatus.PENDING and (row.queue, row.name) in lost,
    }


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
        tries: dict[int, list[StepTryRecord]] = {}
        for one in await handle.step_tries():
            tries.setdefault(one.step_index, []).append(one)
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
                "path": s.path,
                "failed_tries": [
                    {
                        "try": t.try_number,
                        "started_at": t.started_at.isoformat(),
                        "ended_at": t.ended_at.isoformat(),
                        "error": load_error(t.error),
                    }
                    for t in tries.get(s.step_index, ())
                ],
            }
            for s in steps
        ]
        print(json.dumps(data, indent=2))
        return 0
    print(f"workflow  {record.id}\nname      {record.name}\nstatus    {record.status.value}")
    print(f"attempts  {record.attempts}/{record.max_attempts}\ninput     {record.input}")
    if record.waiting_for:
        print(f"waiting   for {record.wait_description}")
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
        for t in tries.get(s.step_index, ()):
            failure = load_error(t.error) or {}
            kind, message = failure.get("type"), failure.get("message")
            print(
                f"         try {t.try_number:<3}  {t.started_at:%H:%M:%S}-"
                f"{t.ended_at:%H:%M:%S}  failed  {f'{kind}: ' if kind else ''}{message}"
            )
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
