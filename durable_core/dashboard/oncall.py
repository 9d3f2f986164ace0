"""The dashboard's on-call pages: why workflows fail (and bulk retry or cancel by filter), who
is working, what is scheduled, and whether the workers keep up."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..definitions.schedules import SCHEDULE_HEADER
from ..errors import ConfigurationError
from ..seams.operators import Activity, WorkflowFilter, unserved
from ..seams.records import WorkflowStatus
from .access import read_form
from .urls import workflow_url

if TYPE_CHECKING:
    from ..caller.client import DurableClient
    from .monitor import Monitor

WINDOWS = (("last hour", timedelta(hours=1)), ("last day", timedelta(days=1)))
"""The windows the activity table covers."""
FAILURES_SINCE = timedelta(days=1)
"""The failures page counts the workflows created this recently, unless told otherwise."""
GONE_WITHIN = timedelta(hours=1)
"""Workers gone this recently are listed too, as gone."""
RECENT_RUNS = 5
"""A schedule's latest runs shown."""
BULK = {
    "retry": (
        (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED),
        "Retry",
        "retried-many",
    ),
    "cancel": (
        (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.WAITING),
        "Cancel",
        "cancelled-many",
    ),
}
"""Each bulk action: the statuses it applies to, its verb, its notice."""
BULK_FILTERS = ("status", "name", "queue", "error", "created_after", "created_before")
BULK_MAX = 1000
"""The most workflows one bulk action covers: a request that ends in seconds, each batch
counted and confirmed on its own page."""


def _moment(text: str, what: str) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(f"{what} is not a date and time: {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def filter_of(query: Mapping[str, str]) -> WorkflowFilter:
    """The list's filters (query parameters) as a :class:`WorkflowFilter`."""
    status = query.get("status") or None
    if status is not None and status not in {s.value for s in WorkflowStatus}:
        raise ConfigurationError(f"unknown status {status!r}")
    return WorkflowFilter(
        status=None if status is None else WorkflowStatus(status),
        name=query.get("name") or None,
        queue=query.get("queue") or None,
        error_type=query.get("error") or None,
        created_after=_moment(query.get("created_after", ""), "created after"),
        created_before=_moment(query.get("created_before", ""), "created before"),
    )


class OnCallPages:
    """The on-call pages of the dashboard (mixed into its page class)."""

    client: DurableClient
    monitor: Monitor
    _page: Callable[..., Response]
    """Renders a template with the dashboard's common context."""

    async def failures(self, request: Request) -> Response:
        """The workflows that recorded an error, counted by error type and name (by default
        the failed ones created in the last day), each group linked to its list and its
        bulk actions."""
        query: Mapping[str, str] = request.query_params
        if "status" not in query:
            query = {**query, "status": WorkflowStatus.FAILED.value}
        if "created_after" not in query:
            # Each error's text is read to find its type: by default, only the last day's.
            since = datetime.now(UTC) - FAILURES_SINCE
            query = {**query, "created_after": f"{since:%Y-%m-%dT%H:%M:%S}"}
        where = filter_of(query)
        groups = await self.client.error_counts(where) if self.client.has_queries else []
        base = {k: query.get(k, "") for k in BULK_FILTERS if query.get(k)}
        rows = [
            {
                "group": group,
                "filters": urlencode({**base, "name": group.name, "error": group.error_type or ""}),
            }
            for group in groups
        ]
        context = {
            "rows": rows,
            "filters": {k: query.get(k, "") for k in BULK_FILTERS},
            "supported": self.client.has_queries,
        }
        return self._page(request, "failures.html", context)

    async def bulk(self, request: Request) -> Response:
        """A bulk ``retry`` or ``cancel`` of the workflows a filter covers: the GET shows how
        many (at most :data:`BULK_MAX` at a time) and asks to confirm; the POST, which
        carries what the confirmation showed (the filters, the moment the count was taken,
        how many), does it to no more than that, and shows how many it did."""
        action = request.path_params["action"]
        if action not in BULK:
            return HTMLResponse("no such action", status_code=404)
        statuses, verb, code = BULK[action]
        if request.method == "POST":
            fields = await read_form(request)
            chosen = {k: v for k, v in fields.items() if k in BULK_FILTERS and v}
            shown = fields.get("limit", "")
            if "created_before" not in chosen or not shown.isdigit():
                raise ConfigurationError(
                    f"a bulk {action} is confirmed on its page first: it says how many it covers"
                )
            limit = int(shown[:6])
            if not 1 <= limit <= BULK_MAX:
                raise ConfigurationError(f"a bulk {action} covers 1 to {BULK_MAX} workflows")
        else:
            chosen = {k: v for k, v in request.query_params.items() if k in BULK_FILTERS and v}
            # The confirmed action covers what was counted, not what arrives meanwhile.
            chosen.setdefault("created_before", datetime.now(UTC).isoformat())
        if not {k for k in chosen if k != "created_before"}:
            raise ConfigurationError(f"a bulk {action} needs at least one filter")
        where = filter_of(chosen)
        if request.method == "GET":
            count = await self.client.count_workflows(where, statuses=statuses)
            context = {
                "action": action,
                "verb": verb,
                "count": count,
                "limit": min(count, BULK_MAX),
                "chosen": chosen,
            }
            return self._page(request, "bulk.html", context)
        if action == "retry":
            done = await self.client.retry_workflows(where, limit=limit)
        else:
            done = await self.client.cancel_workflows(where, limit=limit)
        kept = {k: v for k, v in chosen.items() if k != "created_before"}
        query = urlencode({**kept, "notice": code, "count": done})
        return RedirectResponse(f"{request.url_for('workflows')}?{query}", status_code=303)

    async def workers(self, request: Request) -> Response:
        """The live workers (and those gone within the hour), and the pending work no live
        worker serves."""
        context: dict[str, Any] = {"supported": self.client.has_workers}
        if self.client.has_workers:
            workers = await self.client.workers(gone_within=GONE_WITHIN)
            context["live"] = [w for w in workers if w.live]
            context["gone"] = [w for w in workers if not w.live]
            context["unserved"] = unserved(await self.client.backlog(), workers)
        return self._page(request, "workers.html", context)

    async def schedules(self, request: Request) -> Response:
        """Every schedule: its next fire times, its last tick and latest runs, and the pause,
        resume and trigger-now buttons."""
        now = datetime.now(UTC)
        rows = []
        for schedule in await self.client.list_schedules():
            runs = await self.client.list_workflows(name=schedule.workflow_name, limit=50)
            mine = [r for r in runs if (r.headers or {}).get(SCHEDULE_HEADER) == schedule.name]
            upcoming = [schedule.next_tick]
            upcoming += list(islice(schedule.timing.after(max(now, schedule.next_tick)), 2))
            rows.append(
                {
                    "schedule": schedule,
                    "upcoming": [] if schedule.paused else upcoming,
                    "runs": mine[:RECENT_RUNS],
                }
            )
        return self._page(request, "schedules.html", {"rows": rows})

    async def schedule_act(self, request: Request) -> Response:
        """``pause``, ``resume``, ``trigger`` or ``backfill`` the schedule named by the form's
        ``schedule`` (a backfill's window: ``start`` and ``end``, read in UTC without an
        offset, and its ``overlap``)."""
        action = request.path_params["action"]
        fields = await read_form(request)
        name = fields.get("schedule", "")
        if action == "pause":
            await self.client.pause_schedule(name)
        elif action == "resume":
            await self.client.resume_schedule(name)
        elif action == "trigger":
            handle = await self.client.trigger_schedule(name)
            if handle is None:  # its overlap policy skipped or buffered the start
                url = request.url_for("schedules")
                return RedirectResponse(f"{url}?notice=trigger-held", status_code=303)
            return RedirectResponse(
                workflow_url(request, handle.id, notice="triggered"), status_code=303
            )
        elif action == "backfill":
            start, end = (_window_end(w, fields.get(w, "")) for w in ("start", "end"))
            overlap = fields.get("overlap") or "allow_all"
            started = await self.client.backfill_schedule(name, start, end, overlap=overlap)
            query = urlencode({"notice": "backfilled", "count": len(started)})
            return RedirectResponse(f"{request.url_for('schedules')}?{query}", status_code=303)
        else:
            return HTMLResponse("no such action", status_code=404)
        codes = {"pause": "paused", "resume": "resumed"}
        return RedirectResponse(
            f"{request.url_for('schedules')}?notice={codes[action]}", status_code=303
        )

    async def queues(self, request: Request) -> Response:
        """Per queue: the backlog now, and over the last hour and day the workflows created,
        how soon they started, throughput and failure rate (from the database); below, the
        backlog and throughput charts sampled while the page is open."""
        backlog: dict[str, dict[str, int]] = {}
        for count in await self.client.backlog():
            statuses = backlog.setdefault(count.queue, {})
            statuses[count.status.value] = statuses.get(count.status.value, 0) + count.count
        windows = []
        if self.client.has_queries:
            for label, span in WINDOWS:
                activity = {a.queue: a for a in await self.client.activity(span)}
                queues = sorted({*activity, *backlog})
                rows = [(q, activity.get(q) or Activity(q)) for q in queues]
                total = _total(a for _, a in rows)
                minutes = span / timedelta(minutes=1)
                windows.append({"label": label, "minutes": minutes, "rows": rows, "total": total})
        context = {
            "throughput": self.client.has_stats,
            "windows": windows,
            "backlog": backlog,
        }
        return self._page(request, "queues.html", context)

    async def queue_data(self, request: Request) -> Response:
        """The charts' samples as JSON (a new sample is taken when the last is old)."""
        await self.monitor.sample()
        return JSONResponse(self.monitor.series())


def _total(activities: Any) -> Activity:
    """Every queue's activity added up (the latency: the worst, and the mean weighted by
    starts)."""
    created = started = 0
    weighted = 0.0
    worst: float | None = None
    ended: dict[str, int] = {}
    for a in activities:
        created += a.created
        started += a.started
        if a.start_latency_avg is not None:
            weighted += a.start_latency_avg * a.started
        if a.start_latency_max is not None:
            worst = max(worst or 0.0, a.start_latency_max)
        for outcome, n in a.ended.items():
            ended[outcome] = ended.get(outcome, 0) + n
    return Activity(
        "all",
        created=created,
        started=started,
        start_latency_avg=weighted / started if started else None,
        start_latency_max=worst,
        ended=ended,
    )


def _window_end(what: str, text: str) -> datetime:
    """A backfill form's ``start`` or ``end``: ISO 8601, in UTC without an offset."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigurationError(
            f"a backfill's {what} is a moment such as 2026-01-31T09:00 (UTC), got {text[:40]!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
