"""The web dashboard (``pip install 'durable-core[dashboard]'``; ``durable dashboard``).

:func:`create_app` builds it as an ASGI application over a
:class:`~durable_core.caller.client.DurableClient`, to serve on its own or mount in
your own app. It reads and acts only through the client's admin API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Imported on first use: ``durable dashboard`` names the missing extra itself.
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
