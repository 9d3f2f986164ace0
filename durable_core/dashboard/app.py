"""The dashboard as a Starlette application: :func:`create_app`.

Every page reads through :class:`~durable_core.caller.client.DurableClient`'s admin API
(list, get, steps, attempts, counts, workers, schedules) and every action writes
through it (retry, cancel, fork, send, bulk retry and cancel, pause, resume,
trigger); each page is a few queries on indexes, a page of rows at a time. The
on-call pages (failures, bulk actions, workers, schedules, activity) are in
:mod:`.oncall`; what keeps it safe to expose is in :mod:`.security`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, pass_context, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..caller.client import DurableClient
from ..errors import ConfigurationError, SerializationError, WorkflowNotFoundError
from ..redaction import redact
from ..seams.attributes import Attributes, filter_term, parse_filter
from ..seams.records import WorkflowStatus
from ..seams.roles import describe
from ..seams.store import Store
from . import present
from .access import Access, read_form
from .monitor import Monitor
from .oncall import OnCallPages, filter_of
from .security import (
    SESSION_MAX_AGE,
    SecurityHeaders,
    TrustedHosts,
    check_hosts,
    notice,
    server_error,
)
from .signin import check_token
from .urls import workflow_url

PAGE_SIZE = 50
"""Workflows on one page of the list."""
STEP_PAGE = 100
"""Steps on one page of a workflow's timeline."""
REFRESH_SECONDS = 5
"""How often an open page refreshes itself."""
FILTERS = ("status", "name", "queue", "error", "created_after", "created_before", "attr")
"""The list's filters, as query parameters (``error``: the recorded error's type; ``attr``:
attribute filters, ``NAME=VALUE`` terms separated by commas, as ``durable list --attr``)."""


def create_app(
    client: DurableClient | Store,
    *,
    token: str | None = None,
    refresh_seconds: float = REFRESH_SECONDS,
    allowed_hosts: Sequence[str] = (),
    session_max_age: int = SESSION_MAX_AGE,
    extra_routes: Sequence[BaseRoute] = (),
) -> Starlette:
    """The dashboard over ``client`` (or an opened store), as an ASGI app to serve with
    uvicorn or mount in your own app (``Mount("/durable", create_app(client))``).

    It answers only requests whose ``Host`` is in ``allowed_hosts`` (names, or patterns such
    as ``*.example.com``; ``["*"]``: any; default: this machine's names). With a ``token``
    (at least 16 characters), every page and action needs it: sign in once with the form
    (a session of ``session_max_age`` seconds, ended by signing out; the cookie holds a
    random id, never the token), or send ``Authorization: Bearer <token>``; a token in
    a URL is refused. ``extra_routes`` are served beside the dashboard's (a metrics route,
    say), behind the same host check and headers but not the token.
    """
    dashboard = _Dashboard(
        client if isinstance(client, DurableClient) else DurableClient(client),
        check_token(token),
        refresh_seconds,
        session_max_age,
    )
    guard = dashboard.guarded
    routes: list[BaseRoute] = [
        Route("/", guard(dashboard.workflows), name="workflows"),
        # One route for a workflow's page (GET) and its actions (POST, the action in the
        # form): any id fits one path segment, its "/" encoded.
        Route(
            "/workflows/{workflow_id:path}",
            guard(dashboard.workflow),
            methods=["GET", "POST"],
            name="workflow",
        ),
        Route("/failures", guard(dashboard.failures), name="failures"),
        Route("/bulk/{action:str}", guard(dashboard.bulk), methods=["GET", "POST"], name="bulk"),
        Route("/workers", guard(dashboard.workers), name="workers"),
        Route("/schedules", guard(dashboard.schedules), name="schedules"),
        Route(
            "/schedules/{action:str}",
            guard(dashboard.schedule_act),
            methods=["POST"],
            name="schedule_act",
        ),
        Route("/queues", guard(dashboard.queues), name="queues"),
        Route("/queues/data", guard(dashboard.queue_data), name="queue_data"),
        Route("/metrics", guard(dashboard.metrics), name="metrics"),
        Route("/login", dashboard.login, methods=["GET", "POST"], name="login"),
        Route("/logout", guard(dashboard.logout), methods=["POST"], name="logout"),
        Mount(
            "/static",
            StaticFiles(packages=[("durable_core.dashboard", "static")]),
            name="static",
        ),
        # Routes served beside the dashboard's go here.
        *extra_routes,
    ]
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(TrustedHosts, allowed_hosts=check_hosts(allowed_hosts)),
    ]
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers={Exception: server_error}
    )


class _Dashboard(OnCallPages, Access):
    """The pages and actions, sharing one client, its monitor and the templates."""

    def __init__(
        self, client: DurableClient, token: str | None, refresh: float, max_age: float
    ) -> None:
        self.client = client
        self.init_access(token, max_age)
        self.refresh = refresh
        self.monitor = Monitor(client)
        self.store_metrics: Any = None
        """The ``/metrics`` reader (a ``metrics.StoreMetrics``), made at the first scrape."""
        env = Environment(
            loader=PackageLoader("durable_core.dashboard", "templates"),
            autoescape=select_autoescape(default=True),
        )
        env.filters["value"] = present.show_value
        env.filters["arguments"] = present.show_arguments
        env.filters["when"] = lambda t: "" if t is None else f"{t:%Y-%m-%d %H:%M:%S}"
        env.filters["short"] = present.shorten
        env.globals["duration"] = present.duration
        env.globals["seconds"] = present.seconds
        env.globals["error_of"] = present.error_of
        env.globals["workflow_url"] = pass_context(
            lambda context, workflow_id, **query: workflow_url(
                context["request"], workflow_id, **query
            )
        )
        self.templates = Jinja2Templates(env=env)

    def _page(
        self, request: Request, template: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        codes = request.query_params
        context = {
            "store": redact(describe(self.client.store)),
            "refresh": self.refresh,
            "statuses": [s.value for s in WorkflowStatus],
            "signed_in": self.token is not None,
            "notice": notice(codes.get("notice", ""), dict(codes)),
            **context,
        }
        return self.templates.TemplateResponse(request, template, context, status_code=status_code)

    # -- pages -------------------------------------------------------------------------------

    async def workflows(self, request: Request) -> Response:
        """The list, newest first, a page at a time, with its filters; ``?id=`` finds one."""
        query = request.query_params
        wanted = query.get("id", "")
        if wanted.strip():
            try:
                await self.client.get(wanted)
            except WorkflowNotFoundError:
                if wanted.strip() == wanted:
                    raise  # a 404 page saying so
                wanted = wanted.strip()  # pasted with a space around it
                await self.client.get(wanted)
            return RedirectResponse(workflow_url(request, wanted), 303)
        before = query.get("before") or None
        where = filter_of(query)
        terms = [term for term in query.get("attr", "").split(",") if term.strip()]
        attributes = dict(parse_filter(term) for term in terms)
        rows = await self.client.list_workflows(
            attributes=attributes or None,
            status=where.status,
            name=where.name,
            queue=where.queue,
            error_type=where.error_type,
            created_after=where.created_after,
            created_before=where.created_before,
            before=before,
            limit=PAGE_SIZE + 1,
        )
        filters = {key: query.get(key, "") for key in FILTERS}
        kept = {key: value for key, value in filters.items() if value}
        older = None
        if len(rows) > PAGE_SIZE:
            rows = rows[:PAGE_SIZE]
            older = "?" + urlencode({**kept, "before": rows[-1].id})
        context = {
            "rows": rows,
            "filters": filters,
            "kept": urlencode(kept),
            "older": older,
            "newest": "?" + urlencode(kept) if before else None,
            "live": before is None,
            # The bulk actions cover the other filters only: none is offered with attributes.
            "bulk": bool(kept) and not attributes and self.client.has_queries,
        }
        template = "rows.html" if query.get("fragment") else "workflows.html"
        return self._page(request, template, context)

    async def workflow(self, request: Request) -> Response:
        """One workflow: its row, its steps on a timeline a page at a time (with their failed
        tries), its attempts, parent and children; a form to send it a message. A POST is
        one of its actions (:meth:`act`)."""
        workflow_id = request.path_params["workflow_id"] or request.query_params.get("id", "")
        if not workflow_id:
            return RedirectResponse(request.url_for("workflows"), 303)
        if request.method == "POST":
            return await self.act(request, workflow_id)
        record = await self.client.get(workflow_id)
        handle = self.client.handle(workflow_id)
        first = _index(request.query_params.get("steps", "0"))
        steps = await self.client.steps_page(workflow_id, first=first, limit=STEP_PAGE + 1)
        more = len(steps) > STEP_PAGE
        steps = steps[:STEP_PAGE]
        attempts = await handle.attempts()
        shown = {s.step_index for s in steps}
        tries = [t for t in await handle.step_tries() if t.step_index in shown]
        children = await self.client.list_workflows(parent_id=workflow_id, limit=PAGE_SIZE)
        kind, _, topic = (record.waiting_for or "").partition(":")
        context = {
            "record": record,
            "steps": present.timeline(record, steps, datetime.now(UTC)),
            "first": first,
            "earlier": max(first - STEP_PAGE, 0) if first else None,
            "later": first + STEP_PAGE if more else None,
            "attempts": attempts,
            "tries": present.tries_by_step(tries),
            "children": children,
            "error": present.error_of(record.error),
            "waiting": record.wait_description or "",
            "topic": topic if kind == "message" else "",
            "why_pending": await self.client.why_pending(record),
            "attributes": await _attributes(self.client, workflow_id),
            "live": not record.status.is_terminal,
        }
        template = "workflow_live.html" if request.query_params.get("fragment") else "workflow.html"
        return self._page(request, template, context)

    async def act(self, request: Request, workflow_id: str) -> Response:
        """The form's ``action`` on one workflow: ``retry``, ``cancel``, ``fork`` (from the
        form's ``step``) or ``send`` (the form's ``topic`` and JSON ``message``)."""
        form = await read_form(request)
        action = form.get("action", "")
        target, extra = workflow_id, {}
        if action == "retry":
            await self.client.retry(workflow_id)
        elif action == "cancel":
            await self.client.cancel(workflow_id)
        elif action == "fork":
            step = form.get("step", "")
            if not step.isdigit() or len(step) > 9:
                raise ConfigurationError(f"fork needs a step index, got {step[:20]!r}")
            target = (await self.client.fork(workflow_id, from_step=int(step))).id
            extra = {"step": step}
        elif action == "send":
            try:
                message = json.loads(form.get("message", ""))
            except ValueError as exc:
                raise ConfigurationError(f"the message is not JSON: {exc}") from None
            await self.client.get(workflow_id)  # WorkflowNotFoundError: a 404 page
            try:
                await self.client.send(workflow_id, message, topic=form.get("topic", ""))
            except SerializationError as exc:
                raise ConfigurationError(str(exc)) from None
        else:
            return HTMLResponse("no such action", status_code=404)
        codes = {"retry": "retried", "cancel": "cancelled", "fork": "forked", "send": "sent"}
        url = workflow_url(request, target, notice=codes[action], **extra)
        return RedirectResponse(url, status_code=303)

    async def metrics(self, request: Request) -> Response:
        """The store's figures for Prometheus (the ``[metrics]`` extra): the backlog by
        queue, workflow and status, the oldest pending workflow's age, and the attempts
        that ended by queue and outcome, read at each scrape."""
        try:
            from ..observers.metrics import CONTENT_TYPE, StoreMetrics, store_exposition
        except ConfigurationError as exc:
            return PlainTextResponse(str(exc), status_code=501)
        if self.store_metrics is None:
            self.store_metrics = StoreMetrics(self.client, ended=True)
        body = await store_exposition(self.store_metrics)
        return Response(body, headers={"content-type": CONTENT_TYPE})


async def _attributes(client: DurableClient, workflow_id: str) -> list[tuple[str, str | None]]:
    """The workflow's attributes as ``NAME=VALUE``, each with the query of the list filtered
    by it (``None`` where no term holds it); none on a store that keeps none."""
    if not isinstance(client.store, Attributes):
        return []
    found = await client.store.get_attributes(workflow_id)
    shown = []
    for name, value in found.items():
        term = filter_term(name, value)
        shown.append((f"{name}={value}", None if term is None else urlencode({"attr": term})))
    return shown


def _index(text: str) -> int:
    """A step index from the query (0 when it is none)."""
    return int(text) if text.isdigit() and len(text) < 10 else 0
