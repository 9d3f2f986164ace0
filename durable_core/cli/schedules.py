"""``durable schedule add|list|pause|resume|trigger|backfill|delete``: schedules from the
command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from ..caller.client import DurableClient
from ..definitions.registry import default_registry
from ..definitions.schedules import Overlap, Schedule, ScheduleRecord, check_overlap
from ..errors import ConfigurationError
from .common import (
    APP_ENV,
    app_modules,
    import_app,
    json_option,
    opened_store,
    with_app,
    with_database,
)
from .output import iso, printable, when


def add_commands(commands: Any) -> None:
    """Add ``durable schedule`` and its subcommands to the ``commands`` subparsers."""
    schedule = commands.add_parser(
        "schedule", help="add, list, pause, resume, trigger, backfill or delete schedules"
    )
    actions = schedule.add_subparsers(dest="action", required=True)

    def handler(work: Callable[[argparse.Namespace, DurableClient], Awaitable[str]]) -> Any:
        async def run(args: argparse.Namespace) -> int:
            async with opened_store(args.database_url, args.embedded_dir) as store:
                print(await work(args, DurableClient(store)))
            return 0

        return run

    async def add(args: argparse.Namespace, client: DurableClient) -> str:
        positional = json_option("--args", args.args, list)
        keywords = json_option("--kwargs", args.kwargs, dict)
        import_app(app_modules(args), None)
        definition = default_registry.get(args.workflow, importer=f"--app (or ${APP_ENV})")
        spec = Schedule(
            args.cron,
            args.timezone,
            catch_up=args.catch_up,
            args=positional,
            kwargs=keywords,
            queue=args.queue,
            overlap=check_overlap(args.overlap),
        )
        row = await client.add_schedule(args.name, definition, spec)
        tick = iso(row.next_tick) or "never"
        return printable(f"schedule {row.name}: next tick {tick}", one_line=True)

    async def listing(args: argparse.Namespace, client: DurableClient) -> str:
        rows = await client.list_schedules()
        if args.json:
            return json.dumps([_schedule_json(row) for row in rows], indent=2)
        lines = [f"{'name':24}  {'state':7}  {'next tick (UTC)':19}  {'cron':16}  workflow"]
        for row in rows:
            state = "paused" if row.paused else "active"
            cron = f"{row.cron} {row.timezone}" if row.timezone != "UTC" else row.cron
            tick = when(row.next_tick)
            line = f"{row.name:24}  {state:7}  {tick:19}  {cron:16}  {row.workflow_name}"
            lines.append(printable(line, one_line=True))
        return "\n".join(lines)

    async def pause(args: argparse.Namespace, client: DurableClient) -> str:
        await client.pause_schedule(args.name)
        return printable(f"schedule {args.name} paused", one_line=True)

    async def resume(args: argparse.Namespace, client: DurableClient) -> str:
        await client.resume_schedule(args.name)
        row = await client.get_schedule(args.name)
        tick = iso(row.next_tick) or "never"
        return printable(f"schedule {args.name} resumed: next tick {tick}", one_line=True)

    async def trigger(args: argparse.Namespace, client: DurableClient) -> str:
        handle = await client.trigger_schedule(args.name)
        if handle is None:
            overlap = (await client.get_schedule(args.name)).overlap
            done = "skipped" if overlap is Overlap.SKIP else "buffered"
            text = f"schedule {args.name}: its latest run has not finished; {done} ({overlap})"
        else:
            text = f"schedule {args.name}: started workflow {handle.id}"
        return printable(text, one_line=True)

    async def backfill(args: argparse.Namespace, client: DurableClient) -> str:
        start, end = _moment("--start", args.start), _moment("--end", args.end)
        started = await client.backfill_schedule(
            args.name, start, end, overlap=check_overlap(args.overlap)
        )
        window = f"from {start.isoformat()} to {end.isoformat()}"
        text = f"schedule {args.name}: backfill {window} started {len(started)} workflow(s)"
        return printable("\n".join([printable(text, one_line=True), *started]))

    async def delete(args: argparse.Namespace, client: DurableClient) -> str:
        await client.delete_schedule(args.name)
        return printable(f"schedule {args.name} deleted", one_line=True)

    adding = with_app(with_database(actions.add_parser("add", help="add a schedule")))
    adding.add_argument("name", help="the schedule's name")
    adding.add_argument("workflow", help="the workflow's registered name (module.qualname)")
    adding.add_argument("cron", help="a cron expression ('*/5 * * * *'; six fields: second first)")
    adding.add_argument("--timezone", default="UTC", help="an IANA time zone (default: UTC)")
    adding.add_argument(
        "--catch-up", type=int, default=0, help="missed ticks to start late (default: 0, skip)"
    )
    adding.add_argument("--args", default="[]", help="positional arguments, a JSON array")
    adding.add_argument("--kwargs", default="{}", help="keyword arguments, a JSON object")
    adding.add_argument("--queue", help="the queue its workflows go to")
    adding.add_argument("--overlap", default="allow_all", help=OVERLAP_HELP)
    adding.set_defaults(run=handler(add))

    listed = with_database(actions.add_parser("list", help="list schedules by name"))
    listed.add_argument("--json", action="store_true")
    listed.set_defaults(run=handler(listing))

    filling = with_database(
        actions.add_parser("backfill", help="start the workflows of a past window's ticks")
    )
    filling.add_argument("name", help="the schedule's name")
    filling.add_argument(
        "--start", required=True, help="the window's start, ISO 8601 (UTC if naive)"
    )
    filling.add_argument("--end", required=True, help="its end, excluded, at or before now")
    filling.add_argument(
        "--overlap",
        default="allow_all",
        help="allow_all (default: one run per tick), skip or buffer_one",
    )
    filling.set_defaults(run=handler(backfill))

    for name, work, text in (
        ("trigger", trigger, "start a schedule's workflow now, as its overlap policy lets it"),
        ("pause", pause, "stop starting workflows on a schedule"),
        ("resume", resume, "start workflows on a paused schedule again, from its next tick"),
        ("delete", delete, "delete a schedule (not the workflows it started)"),
    ):
        sub = with_database(actions.add_parser(name, help=text))
        sub.add_argument("name", help="the schedule's name")
        sub.set_defaults(run=handler(work))


OVERLAP_HELP = (
    "what a tick does while the latest run has not finished: allow_all (default), skip "
    "or buffer_one"
)


def _moment(option: str, text: str) -> datetime:
    """The moment an option gives in ISO 8601 (read in UTC without an offset)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(
            f"{option} is a moment in ISO 8601 ('2026-01-31T09:00', UTC without an offset), "
            f"got {text[:80]!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _schedule_json(row: ScheduleRecord) -> dict[str, Any]:
    return {
        "name": row.name,
        "workflow": row.workflow_name,
        "cron": row.cron,
        "timezone": row.timezone,
        "input": row.input,
        "queue": row.queue,
        "paused": row.paused,
        "catch_up": row.catch_up,
        "next_tick": iso(row.next_tick),
        "last_tick": iso(row.last_tick),
        "overlap": row.overlap.value,
        "latest_id": row.latest_id,
        "buffered_tick": iso(row.buffered_tick),
    }
