"""Serving the dashboard with uvicorn, as ``durable dashboard`` does.

This module imports nothing of the ``[dashboard]`` extra until it serves, so the
command can say which extra is missing.
"""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import socket
from collections.abc import Sequence

from ..errors import ConfigurationError
from ..redaction import get_logger
from ..seams.store import Store
from .signin import check_token

logger = get_logger("durable_core.dashboard")

EXTRA = ("starlette", "uvicorn", "jinja2")
"""The modules the ``[dashboard]`` extra installs."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_serving(host: str, token: str | None, allowed: Sequence[str] = ()) -> list[str]:
    """Refuse to serve without the extra, beyond this machine without a token, or on every
    interface without the names it is reached by; return the ``Host`` names it answers."""
    missing = [name for name in EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            f"the dashboard needs {', '.join(missing)}: pip install 'durable-core[dashboard]'"
        )
    check_token(token, "--token (or $DURABLE_DASHBOARD_TOKEN)")
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"the dashboard listens on {host}, beyond this machine: give it a --token "
            "(or $DURABLE_DASHBOARD_TOKEN), which every page and action will need"
        )
    from .security import allowed_hosts

    return allowed_hosts(host, allowed)


def listening_socket(host: str, port: int, what: str) -> socket.socket:
    """A socket listening on ``host:port``; :class:`ConfigurationError` in one line when
    it cannot be had (the port is taken or out of range, the host is not this machine's)."""
    if not 0 <= port <= 65535:  # getaddrinfo would take it modulo 65536
        raise ConfigurationError(f"cannot serve {what} on port {port}: ports are 0 to 65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (OSError, UnicodeError) as exc:
        raise ConfigurationError(f"cannot serve {what} on {host}:{port}: {exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not past a listener
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = "the port is taken" if exc.errno == errno.EADDRINUSE else exc.strerror or exc
        raise ConfigurationError(f"cannot serve {what} on {host}:{port}: {why}") from None
    return sock


async def serve(
    store: Store,
    *,
    host: str,
    port: int,
    token: str | None,
    allowed_hosts: Sequence[str] = (),
    forwarded_allow_ips: str | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve the dashboard over ``store`` until interrupted, on ``sock`` if given (else a
    socket it opens on ``host:port``); its URL is logged once it listens (a taken port is
    a :class:`ConfigurationError` first).

    ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are honoured only from the proxies
    ``forwarded_allow_ips`` names (uvicorn's setting: addresses, networks, or ``*``);
    without it, never.
    """
    hosts = check_serving(host, token, allowed_hosts)
    import uvicorn

    from .app import create_app

    sock = sock or listening_socket(host, port, "the dashboard")
    config = uvicorn.Config(
        create_app(store, token=token, allowed_hosts=hosts),
        host=host,
        port=port,
        log_level="warning",
        proxy_headers=forwarded_allow_ips is not None,
        forwarded_allow_ips=forwarded_allow_ips or "",
        server_header=False,
    )
    logger.info(
        "dashboard of %s on http://%s:%s/ (hosts: %s)",
        store.description,
        f"[{host}]" if ":" in host else host,
        sock.getsockname()[1],
        ", ".join(hosts),
    )
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
