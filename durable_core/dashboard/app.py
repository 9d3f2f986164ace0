"""The dashboard as a Starlette application: :func:`create_app`.

Every page reads through :class:`~durable_core.client.DurableClient`'s admin API
(list, get, steps, attempts) and every action writes through it (retry, cancel,
fork); each page is a few queries on indexes, a page of rows at a time.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..client import DurableClient
from ..errors import ConfigurationError, FrameworkError, WorkflowNotFoundError
from ..records import WorkflowStatus
from ..redaction import redact
from ..store import Store
from . import present
from .monitor import Monitor

PAGE_SIZE = 50
"""Workflows on one page of the list."""
REFRESH_SECONDS = 5
"""How often an open page refreshes itself."""
TOKEN_COOKIE = "durable_dashboard_token"
FILTERS = ("status", "name", "queue", "created_after", "created_before")
"""The list's filters, as query parameters."""

Endpoint = Callable[[Request], Awaitable[Response]]


def create_app(
    client: DurableClient | Store,
    *,
    token: str | None = None,
    refresh_seconds: float = REFRESH_SECONDS,
) -> Starlette:
    """The dashboard over ``client`` (or an opened store), as an ASGI app to serve with
    uvicorn or mount in your own app (``Mount("/durable", create_app(client))``).

    With a ``token``, every page and action needs it: open any page with ``?token=...``
    once (it is kept in a cookie), or send ``Authorization: Bearer <token>``.
    """
    dashboard = _Dashboard(
        client if isinstance(client, DurableClient) else DurableClient(client),
        token,
        refresh_seconds,
    )
    guard = dashboard.guarded
    return Starlette(
        routes=[
            Route("/", guard(dashboard.workflows), name="workflows"),
            Route("/workflows/{workflow_id}", guard(dashboard.workflow), name="workflow"),
            Route(
                "/workflows/{workflow_id}/{action:str}",
                guard(dashboard.act),
                methods=["POST"],
                name="act",
            ),
            Route("/queues", guard(dashboard.queues), name="queues"),
            Route("/queues/data", guard(dashboard.queue_data), name="queue_data"),
            Route("/login", dashboard.login, methods=["GET", "POST"], name="login"),
            Mount(
                "/static",
                StaticFiles(packages=[("durable_core.dashboard", "static")]),
                name="static",
            ),
        ],
    )


def _utc(text: str, what: str) -> datetime | None:
    """A ``datetime-local`` form value (or an ISO time), read as UTC when it has no zone."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(f"{what} is not a date and time: {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class _Dashboard:
    """The pages and actions, sharing one client, its monitor and the templates."""

    def __init__(self, client: DurableClient, token: str | None, refresh: float) -> None:
        self.client = client
        self.token = token
        self.refresh = refresh
        self.monitor = Monitor(client)
        env = Environment(
            loader=PackageLoader("durable_core.dashboard", "templates"),
            autoescape=select_autoescape(default=True),
        )
        env.filters["value"] = present.show_value
        env.filters["arguments"] = present.show_arguments
        env.filters["when"] = lambda t: "" if t is None else f"{t:%Y-%m-%d %H:%M:%S}"
        env.globals["duration"] = present.duration
        self.templates = Jinja2Templates(env=env)

    # -- access ------------------------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        if self.token is None:
            return True
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = request.cookies.get(TOKEN_COOKIE) or bearer
        return hmac.compare_digest(given.encode(), self.token.encode())

    def guarded(self, endpoint: Endpoint) -> Endpoint:
        """``endpoint``, refused without the token and, for a POST, from another site."""

        async def run(request: Request) -> Response:
            if self.token is not None and request.query_params.get("token"):
                return await self.login(request)
            if not self._authorized(request):
                return self._page(request, "login.html", {"failed": False}, status_code=401)
            if request.method == "POST" and not _same_origin(request):
                return HTMLResponse("refused: a cross-site form", status_code=403)
            try:
                return await endpoint(request)
            except WorkflowNotFoundError as exc:
                return self._page(request, "error.html", {"message": str(exc)}, status_code=404)
            except FrameworkError as exc:
                return self._page(request, "error.html", {"message": str(exc)}, status_code=400)

        return run

    async def login(self, request: Request) -> Response:
        """Take the token from ``?token=`` or the login form; keep it in a cookie."""
        given = request.query_params.get("token", "")
        if request.method == "POST":
            given = (await _form(request)).get("token", "")
        if self.token is None or not hmac.compare_digest(given.encode(), self.token.encode()):
            return self._page(request, "login.html", {"failed": bool(given)}, status_code=401)
        if request.method == "POST" or request.url.path.endswith("/login"):
            target = str(request.url_for("workflows"))
        else:
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = str(request.url.replace(query=urlencode(rest)))
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict")
        return response

    def _page(
        self, request: Request, template: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        context = {
            "store": redact(self.client.store.description),
            "refresh": self.refresh,
            "statuses": [s.value for s in WorkflowStatus],
            **context,
        }
        return self.templates.TemplateResponse(request, template, context, status_code=status_code)

    # -- pages -------------------------------------------------------------------------------

    async def workflows(self, request: Request) -> Response:
        """The list, newest first, a page at a time, with its filters; ``?id=`` finds one."""
        query = request.query_params
        wanted = query.get("id", "").strip()
        if wanted:
            await self.client.get(wanted)  # WorkflowNotFoundError: a 404 page saying so
            return RedirectResponse(request.url_for("workflow", workflow_id=wanted), 303)
        before = query.get("before") or None
        rows = await self.client.list_workflows(
            status=query.get("status") or None,
            name=query.get("name") or None,
            queue=query.get("queue") or None,
            created_after=_utc(query.get("created_after", ""), "created after"),
            created_before=_utc(query.get("created_before", ""), "created before"),
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
            "older": older,
            "newest": "?" + urlencode(kept) if before else None,
            "live": before is None,
        }
        template = "rows.html" if query.get("fragment") else "workflows.html"
        return self._page(request, template, context)

    async def workflow(self, request: Request) -> Response:
        """One workflow: its row, its steps on a timeline (with their failed tries), its
        attempts, parent and children."""
        workflow_id = request.path_params["workflow_id"]
        record = await self.client.get(workflow_id)
        handle = self.client.handle(workflow_id)
        steps = await handle.steps()
        attempts = await handle.attempts()
        tries = await handle.step_tries()
        children = await self.client.list_workflows(parent_id=workflow_id, limit=PAGE_SIZE)
        context = {
            "record": record,
            "steps": present.timeline(record, steps, datetime.now(UTC)),
            "attempts": attempts,
            "tries": present.tries_by_step(tries),
            "children": children,
            "error": present.error_of(record.error),
            "error_of": present.error_of,
            "waiting": record.wait_description or "",
            "notice": request.query_params.get("notice", ""),
            "live": not record.status.is_terminal,
        }
        template = "workflow_live.html" if request.query_params.get("fragment") else "workflow.html"
        return self._page(request, template, context)

    async def act(self, request: Request) -> Response:
        """``retry``, ``cancel`` or ``fork`` (from the form's ``step``) one workflow."""
        workflow_id = request.path_params["workflow_id"]
        action = request.path_params["action"]
        target = workflow_id
        if action == "retry":
            await self.client.retry(workflow_id)
            notice = "retried: it is pending again, its succeeded steps stay cached"
        elif action == "cancel":
            await self.client.cancel(workflow_id)
            notice = "cancelled"
        elif action == "fork":
            step = (await _form(request)).get("step", "")
            if not step.isdigit():
                raise ConfigurationError(f"fork needs a step index, got {step!r}")
            fork = await self.client.fork(workflow_id, from_step=int(step))
            target = fork.id
            notice = f"started as a copy of {workflow_id} that runs again from step {step}"
        else:
            return HTMLResponse(f"no action {action!r}", status_code=404)
        url = request.url_for("workflow", workflow_id=target)
        return RedirectResponse(f"{url}?{urlencode({'notice': notice})}", status_code=303)

    async def queues(self, request: Request) -> Response:
        """Backlog and throughput per queue, as charts that refresh themselves."""
        return self._page(request, "queues.html", {"throughput": self.client.has_stats})

    async def queue_data(self, request: Request) -> Response:
        """The charts' samples as JSON (a new sample is taken when the last is old)."""
        await self.monitor.sample()
        return JSONResponse(self.monitor.series())


async def _form(request: Request) -> dict[str, str]:
    """A URL-encoded form's fields (the dashboard posts nothing else)."""
    fields = parse_qs((await request.body()).decode("utf-8", "replace"))
    return {key: values[-1] for key, values in fields.items()}


def _same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this dashboard (its ``Origin`` is this host)."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    return urlsplit(origin).netloc == request.headers.get("host")
