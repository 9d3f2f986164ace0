"""The web dashboard (``pip install 'durable-core[dashboard]'``; ``durable dashboard``).

:func:`create_app` builds it as an ASGI application over a
:class:`~durable_core.client.DurableClient`, to serve on its own or mount in
your own app. It reads and acts only through the client's admin API.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
