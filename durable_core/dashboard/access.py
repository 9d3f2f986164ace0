"""Who may use the dashboard: the token, sessions, the slow-down of guessing, cross-site
forms, and the forms' size (the rules are in :mod:`.signin` and :mod:`.security`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from ..errors import (
    ConfigurationError,
    FrameworkError,
    StoreUnavailableError,
    WorkflowNotFoundError,
)
from ..redaction import REDACTING
from .security import SESSION_COOKIE
from .signin import Sessions, Throttle, same_token

Endpoint = Callable[[Request], Awaitable[Response]]

MAX_FORM_BYTES = 1024 * 1024
"""The largest form the dashboard reads (a message sent from its page included)."""


class FormTooLargeError(ConfigurationError):
    """A form past :data:`MAX_FORM_BYTES`."""


def _quiet_access_logs() -> None:
    """Redact the access logs of the servers an app is served by (a token typed into a
    URL would be written there whole)."""
    for name in ("uvicorn.access", "gunicorn.access", "hypercorn.access"):
        logger = logging.getLogger(name)
        if REDACTING not in logger.filters:
            logger.addFilter(REDACTING)


class Access:
    """The dashboard's access control (mixed into its page class)."""

    token: str | None
    sessions: Sessions
    throttle: Throttle
    _page: Callable[..., Response]
    templates: Jinja2Templates

    def init_access(self, token: str | None, max_age: float) -> None:
        """Guard the pages with ``token`` (``None``: open), sessions lasting ``max_age``
        seconds."""
        self.token = token
        self.sessions = Sessions(max_age)
        self.throttle = Throttle()
        _quiet_access_logs()

    def _authorized(self, request: Request) -> bool:
        """Signed in (an open session), or the bearer token; a wrong bearer counts as a
        wrong guess."""
        if self.token is None:
            return True
        if self.sessions.valid(request.cookies.get(SESSION_COOKIE)):
            return True
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer "):
            return False
        if same_token(header.removeprefix("Bearer ").strip(), self.token):
            return True
        self.throttle.failed(_client(request))
        return False

    def guarded(self, endpoint: Endpoint) -> Endpoint:
        """``endpoint``, refused without the token and, for a POST, from another site; its
        errors as pages (bad input: 400, a missing workflow: 404, a large form: 413, the
        database out of reach: 503)."""

        async def run(request: Request) -> Response:
            if self.token is not None:
                shut = self.throttle.wait(_client(request))
                if shut > 0:
                    return _too_many(shut)
                if "token" in request.query_params:
                    return self._login_page(request, failed=False, in_url=True)
                if not self._authorized(request):
                    shut = self.throttle.wait(_client(request))
                    if shut > 0:
                        return _too_many(shut)
                    return self._login_page(request, failed=False)
            if request.method == "POST" and not same_origin(request):
                return HTMLResponse("refused: a cross-site form", status_code=403)
            try:
                return await endpoint(request)
            except WorkflowNotFoundError as exc:
                return self._page(request, "error.html", {"message": str(exc)}, status_code=404)
            except FormTooLargeError as exc:
                return self._page(request, "error.html", {"message": str(exc)}, status_code=413)
            except StoreUnavailableError as exc:  # a restart, a failover: ask again soon
                page = self._page(request, "error.html", {"message": str(exc)}, status_code=503)
                page.headers["retry-after"] = "5"
                return page
            except FrameworkError as exc:
                return self._page(request, "error.html", {"message": str(exc)}, status_code=400)
            except RecursionError:
                message = "the request holds a value nested too deeply to read"
                return self._page(request, "error.html", {"message": message}, status_code=400)

        return run

    def _login_page(self, request: Request, *, failed: bool, in_url: bool = False) -> Response:
        """The sign-in form: nothing about the store or its workflows."""
        context = {"failed": failed, "in_url": in_url}
        return self.templates.TemplateResponse(request, "login.html", context, status_code=401)

    async def login(self, request: Request) -> Response:
        """The sign-in form (GET), or a sign-in with its ``token`` field (POST): a new
        session, the browser's old one ended. A token in the URL is never taken."""
        if self.token is None:
            return RedirectResponse(request.url_for("workflows"), status_code=303)
        client = _client(request)
        shut = self.throttle.wait(client)
        if shut > 0:
            return _too_many(shut)
        if request.method != "POST":
            return self._login_page(request, failed=False, in_url="token" in request.query_params)
        if not same_origin(request):
            return HTMLResponse("refused: a cross-site form", status_code=403)
        try:
            given = (await read_form(request)).get("token", "")
        except FormTooLargeError:
            given = ""
        if not same_token(given, self.token):
            self.throttle.failed(client)
            shut = self.throttle.wait(client)
            return _too_many(shut) if shut > 0 else self._login_page(request, failed=True)
        self.throttle.succeeded(client)
        session = self.sessions.open(replacing=request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse(request.url_for("workflows"), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            session,
            max_age=int(self.sessions.max_age),
            path=_cookie_path(request),
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(self, request: Request) -> Response:
        """End this browser's session, here (it is refused from now on, the cookie
        replayed or not)."""
        response = RedirectResponse(request.url_for("workflows"), status_code=303)
        if self.token is not None:
            self.sessions.end(request.cookies.get(SESSION_COOKIE))
            response.delete_cookie(SESSION_COOKIE, path=_cookie_path(request))
        return response


def _client(request: Request) -> str:
    """The address a request came from (as uvicorn saw it: behind a trusted proxy, the
    forwarded one)."""
    return request.client.host if request.client else "unknown"


def _too_many(seconds: float) -> Response:
    wait = max(int(seconds + 0.999), 1)
    return PlainTextResponse(
        f"too many wrong tokens from this address: try again in {wait} s",
        status_code=429,
        headers={"retry-after": str(wait)},
    )


def _cookie_path(request: Request) -> str:
    """The path the dashboard is served under (its cookie is sent to it alone)."""
    return request.scope.get("root_path", "") or "/"


async def read_form(request: Request) -> dict[str, str]:
    """A URL-encoded form's fields (the dashboard posts nothing else); past
    :data:`MAX_FORM_BYTES`, a :class:`FormTooLargeError` before the rest is read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise FormTooLargeError(f"a form is at most {MAX_FORM_BYTES // 1024 // 1024} MiB")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormTooLargeError(f"a form is at most {MAX_FORM_BYTES // 1024 // 1024} MiB")
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[-1] for key, values in fields.items()}


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this dashboard: its ``Origin`` is this scheme
    and host (or, without one, the browser says it is same-origin)."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    parts = urlsplit(origin)
    return parts.scheme == request.url.scheme and parts.netloc == request.headers.get("host")
