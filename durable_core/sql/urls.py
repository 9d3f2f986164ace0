"""Reading a database URL, for every SQL backend: the one rule of what a malformed one is."""

from __future__ import annotations

import sqlalchemy as sa

from ..errors import InvalidDatabaseURLError

MAX_PORT = 65535


def parse_url(url: str | sa.URL, kind: str) -> sa.URL:
    """``url`` parsed, or an :class:`InvalidDatabaseURLError` naming ``kind`` (``PostgreSQL``,
    ``MySQL``) and what is wrong: it does not parse, or its port is not 1 to 65535 (the
    socket layer would otherwise fail deep in the driver, or wrap the number around)."""
    try:
        parsed = sa.make_url(url)
        port = parsed.port
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise InvalidDatabaseURLError(f"malformed {kind} URL {str(url)!r}: {exc}") from None
    if port is not None and not 1 <= port <= MAX_PORT:
        shown = parsed.render_as_string(hide_password=True)
        raise InvalidDatabaseURLError(
            f"{kind} URL {shown!r}: port {port} is not a port number (1 to {MAX_PORT})"
        )
    return parsed
