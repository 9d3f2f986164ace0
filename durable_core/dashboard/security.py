"""What keeps the dashboard safe to expose: the hosts it answers, the headers every response
carries, its session cookie's name, and the only notices a page may show.

- Hosts: :class:`TrustedHosts` refuses a request whose ``Host`` is not one the
  dashboard serves (a DNS-rebinding page reaches it under the attacker's name); an
  IPv6 ``Host`` (``[::1]:8484``) is read as its address.
- Headers: a Content-Security-Policy allowing only the dashboard's own scripts, styles
  and forms, ``frame-ancestors 'none'`` with ``X-Frame-Options: DENY`` (no framing,
  so no click-jacking), ``nosniff``, no referrer to another site, and
  ``Cache-Control: no-store`` on every page (a shared machine's browser cache keeps no
  page of it), on every response: refusals and server errors included.
- Sessions: see :mod:`.signin` (random ids kept server-side; the cookie is
  ``HttpOnly``, ``SameSite=Strict``, and ``Secure`` when the request came over https,
  as uvicorn saw it: behind a proxy only when told to trust it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigurationError

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
"""The names this machine reaches the dashboard by: always allowed."""
WILDCARD_BINDS = ("0.0.0.0", "::", "")
"""Addresses that listen on every interface (the names the dashboard is reached by are then
unknown until given)."""
SESSION_COOKIE = "durable_dashboard_session"
SESSION_MAX_AGE = 12 * 3600
"""Seconds a sign-in lasts."""
NO_STORE = ("cache-control", "no-store")
"""What every response but the static files carries: kept in no cache."""

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
HEADERS = (
    ("content-security-policy", CSP),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    # Not no-referrer: a browser then sends its forms with "Origin: null".
    ("referrer-policy", "same-origin"),
)


class SecurityHeaders:
    """Adds :data:`HEADERS` (and :data:`NO_STORE`, but to the static files) to every HTTP
    response, refusals included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        own_path = scope["path"][len(scope.get("root_path", "")) :]
        static = own_path.startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS:
                    headers[name] = value
                if not static:
                    headers[NO_STORE[0]] = NO_STORE[1]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def server_error(request: Request, exc: Exception) -> Response:
    """The answer to a bug (an unexpected exception): nothing of it shown, every header of
    :data:`HEADERS` carried (Starlette's own error page is sent outside the middleware)."""
    return PlainTextResponse(
        "Internal Server Error", status_code=500, headers=dict([*HEADERS, NO_STORE])
    )


def host_name(header: str) -> str:
    """The name or address in a ``Host`` header, without its port (``[::1]:8484``:
    ``::1``), lowercased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def host_matches(name: str, pattern: str) -> bool:
    """Whether the host ``name`` is ``pattern`` (``*``: any; ``*.example.com``: a name
    under it)."""
    pattern = pattern.lower().strip("[]")
    if pattern == "*" or name == pattern:
        return True
    return pattern.startswith("*.") and name.endswith(pattern[1:])


class TrustedHosts:
    """Answers only requests whose ``Host`` matches one of ``allowed_hosts`` (Starlette's
    ``TrustedHostMiddleware`` reads an IPv6 ``Host`` as ``[``, refusing its own
    ``[::1]``)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allowed = list(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            name = host_name(Headers(scope=scope).get("host", ""))
            if not any(host_matches(name, pattern) for pattern in self.allowed):
                await PlainTextResponse("Invalid host header", status_code=400)(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def allowed_hosts(bind: str, given: Iterable[str] = ()) -> list[str]:
    """The ``Host`` names a dashboard listening on ``bind`` answers: this machine's, the
    address it listens on, and ``given`` (``*.example.com`` patterns; ``*``: any). Listening
    on every interface needs ``given``: only the operator knows the names it is reached by."""
    named = [h.strip() for h in given if h.strip()]
    if bind in WILDCARD_BINDS and not named:
        raise ConfigurationError(
            f"the dashboard listens on every interface ({bind or 'all'}): name the hosts it "
            "is reached by with --allowed-host (or $DURABLE_DASHBOARD_ALLOWED_HOSTS, "
            "comma-separated; '*' allows any)"
        )
    for pattern in named:
        wild = "*" in pattern[1:] or (pattern.startswith("*") and not pattern.startswith("*."))
        if wild and pattern != "*":
            raise ConfigurationError(
                f"allowed host {pattern!r}: a name, or a pattern such as '*.example.com'"
            )
    hosts = [*LOOPBACK_HOSTS]
    if bind not in WILDCARD_BINDS:
        hosts.append(bind.strip("[]"))
    return list(dict.fromkeys([*hosts, *named]))


NOTICES = {
    "retried": "Retried: it is pending again; its succeeded steps stay cached.",
    "cancelled": "Cancelled, with its unfinished children.",
    "forked": "Started as a copy that runs again from step {step}.",
    "sent": "Message sent.",
    "retried-many": "Retried {count} workflows.",
    "cancelled-many": "Cancelled {count} workflows.",
    "paused": "Paused: its ticks start nothing until it is resumed.",
    "resumed": "Resumed from its next tick.",
    "triggered": "Started its workflow now.",
    "backfilled": "Backfilled: started {count} workflows (a tick's run that exists is not "
    "started again).",
    "trigger-held": "Its latest run has not finished: as its overlap policy says, the "
    "trigger started nothing (skip) or waits for that run (buffer one).",
}
"""The only notices a page shows, by their ``?notice=`` code; a number is their only blank."""


def notice(code: str, numbers: dict[str, str]) -> str:
    """The text of the notice ``code`` with its numbers filled in (``""``: no such notice,
    or a blank is not a number)."""
    template = NOTICES.get(code)
    if template is None:
        return ""
    values = {k: v for k, v in numbers.items() if v.isdigit() and len(v) <= 12}
    try:
        return template.format(**values)
    except KeyError:
        return ""


def check_hosts(hosts: Sequence[str]) -> list[str]:
    """``hosts`` for ``create_app``: loopback names when none are given."""
    return list(hosts) if hosts else list(LOOPBACK_HOSTS)
