"""Serving the dashboard with uvicorn, as ``durable dashboard`` does."""

from __future__ import annotations

import ipaddress
import logging

from ..errors import ConfigurationError
from ..store import Store

logger = logging.getLogger("durable_core.dashboard")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token."""
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"the dashboard listens on {host}, beyond this machine: give it a --token "
            "(or $DURABLE_DASHBOARD_TOKEN), which every page and action will need"
        )


async def serve(store: Store, *, host: str, port: int, token: str | None) -> None:
    """Serve the dashboard over ``store`` until interrupted."""
    check_exposure(host, token)
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise ConfigurationError(
            f"the dashboard needs its extra: pip install 'durable-core[dashboard]' ({exc})"
        ) from None
    config = uvicorn.Config(
        create_app(store, token=token), host=host, port=port, log_level="warning"
    )
    logger.info("dashboard of %s on http://%s:%s/", store.description, host, port)
    await uvicorn.Server(config).serve()
