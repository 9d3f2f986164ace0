"""Serving the dashboard with uvicorn, as ``durable dashboard`` does.

This module imports nothing of the ``[dashboard]`` extra until it serves, so the
command can say which extra is missing.
"""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import logging
import socket

from ..errors import ConfigurationError
from ..store import Store

logger = logging.getLogger("durable_core.dashboard")

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


def check_serving(host: str, token: str | None) -> None:
    """Refuse to serve without the extra, or beyond this machine without a token."""
    missing = [name for name in EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            f"the dashboard needs {', '.join(missing)}: pip install 'durable-core[dashboard]'"
        )
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"the dashboard listens on {host}, beyond this machine: give it a --token "
            "(or $DURABLE_DASHBOARD_TOKEN), which every page and action will need"
        )


def listening_socket(host: str, port: int, what: str) -> socket.socket:
    """A socket listening on ``host:port``; :class:`ConfigurationError` in one line when
    it cannot be had (the port is taken, the host is not this machine's)."""
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
    store: Store, *, host: str, port: int, token: str | None, sock: socket.socket | None = None
) -> None:
    """Serve the dashboard over ``store`` until interrupted, on ``sock`` if given (else a
    socket it opens on ``host:port``); its URL is logged once it listens (a taken port is
    a :class:`ConfigurationError` first)."""
    check_serving(host, token)
    import uvicorn

    from .app import create_app

    sock = sock or listening_socket(host, port, "the dashboard")
    config = uvicorn.Config(
        create_app(store, token=token), host=host, port=port, log_level="warning"
    )
    logger.info("dashboard of %s on http://%s:%s/", store.description, host, port)
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
