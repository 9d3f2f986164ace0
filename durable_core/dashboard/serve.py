"""Serving the dashboard with uvicorn, as ``durable dashboard`` does.

This module imports nothing of the ``[dashboard]`` extra until it serves, so the
command can say which extra is missing.
"""

from __future__ import annotations

import importlib.util
import ipaddress

from ..errors import ConfigurationError
from ..redaction import get_logger
from ..store import Store

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


async def serve(store: Store, *, host: str, port: int, token: str | None) -> None:
    """Serve the dashboard over ``store`` until interrupted."""
    check_serving(host, token)
    import uvicorn

    from .app import create_app

    config = uvicorn.Config(
        create_app(store, token=token), host=host, port=port, log_level="warning"
    )
    logger.info("dashboard of %s on http://%s:%s/", store.description, host, port)
    await uvicorn.Server(config).serve()
