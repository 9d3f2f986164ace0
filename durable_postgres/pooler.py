"""How the store talks to PostgreSQL through a connection pooler such as PgBouncer.

The URL option ``durable_pooler`` says what stands between the store and the server:

- ``none`` (the default): PostgreSQL itself, or a pooler in session mode that passes
  every startup parameter on.
- ``session`` (PgBouncer's ``pool_mode = session``): each client connection keeps one
  server session for its life. The pooler refuses startup parameters it does not know
  (``jit``, ``plan_cache_mode``, ...), so the store sets them with ``set_config`` on each
  new connection instead. Everything else works as on a direct connection.
- ``transaction`` (``pool_mode = transaction``, the mode of managed poolers): a client
  gets a server session for one transaction at a time. So the store sends unnamed
  statements only (asyncpg's ``statement_cache_size=0``, SQLAlchemy's
  ``prepared_statement_cache_size=0``), sets no session settings (set them on the role:
  ``ALTER ROLE ... SET``), and keeps nothing in a session: ``LISTEN`` and the liveness
  lock go over ``durable_direct_url`` (a URL straight to PostgreSQL) when it is given;
  without it, workers poll for new work and take over a dead worker's workflows when
  its leases expire.

A pooler that refuses a startup parameter, or a prepared statement that meets another
client's on a shared server session, is reported in one line naming the option to set
(:func:`pooler_hint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import unquote_plus

import asyncpg

from durable_core.errors import ConfigurationError, InvalidDatabaseURLError

POOLER_OPTION = "durable_pooler"
DIRECT_URL_OPTION = "durable_direct_url"

STARTUP_SETTINGS = frozenset(
    {"application_name", "client_encoding", "datestyle", "timezone", "standard_conforming_strings"}
)
"""The startup parameters PgBouncer passes on to the server (it refuses the others unless
its ``ignore_startup_parameters`` names them)."""


_DRIVER_OPTIONS = frozenset(
    {
        "service",
        "port",
        "host",
        "dbname",
        "database",
        "user",
        "password",
        "passfile",
        "sslmode",
        "sslcert",
        "sslkey",
        "sslrootcert",
        "sslnegotiation",
        "sslcrl",
        "sslpassword",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
    }
)
"""The URL query options asyncpg reads itself; it sends any other as a server setting."""


class Pooler(Enum):
    """What stands between the store and PostgreSQL (the URL's ``durable_pooler``)."""

    NONE = "none"
    SESSION = "session"
    TRANSACTION = "transaction"


@dataclass(frozen=True, slots=True)
class Connection:
    """How the store's connections are made, once the pooler is known."""

    pooler: Pooler
    startup: dict[str, str]
    """Server settings sent as startup parameters."""
    session: dict[str, str] = field(default_factory=dict)
    """Server settings set with ``set_config`` on each new connection (session mode)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of :func:`asyncpg.connect`."""


def pop_option(url: str, option: str) -> tuple[str, str | None]:
    """Remove ``option=value`` from ``url``'s query; return ``(url, decoded value)``
    (``None``: not given)."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, None
    found: str | None = None
    kept = []
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == option:
            found = unquote_plus(value)
        else:
            kept.append(part)
    return base + ("?" + "&".join(kept) if kept else ""), found


def url_settings(url: str) -> tuple[str, dict[str, str]]:
    """Move the server settings out of ``url``'s query (asyncpg would send them as
    startup parameters); return ``(url, settings)``."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, {}
    settings: dict[str, str] = {}
    kept = []
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key and key not in _DRIVER_OPTIONS:
            settings[unquote_plus(key)] = unquote_plus(value)
        else:
            kept.append(part)
    return base + ("?" + "&".join(kept) if kept else ""), settings


def parse_pooler(value: str | None) -> Pooler:
    """The :class:`Pooler` a ``durable_pooler`` value names."""
    if value is None:
        return Pooler.NONE
    if value.strip().lower() == "statement":
        raise InvalidDatabaseURLError(
            f"{POOLER_OPTION}=statement in the PostgreSQL URL: a statement-mode pooler cannot "
            "run the store's transactions of several statements (claims, enqueues); use "
            "pool_mode = transaction and durable_pooler=transaction"
        )
    try:
        return Pooler(value.strip().lower())
    except ValueError:
        raise InvalidDatabaseURLError(
            f"{POOLER_OPTION}={value!r} in the PostgreSQL URL: use transaction, session or none"
        ) from None


def plan(pooler: Pooler, settings: Mapping[str, str], given: Mapping[str, str]) -> Connection:
    """How to connect behind ``pooler``: ``settings`` are every server setting the store's
    sessions take, ``given`` those the caller passed itself (``server_settings=``)."""
    if pooler is Pooler.NONE:
        return Connection(pooler, dict(settings))
    startup = {k: v for k, v in settings.items() if k.lower() in STARTUP_SETTINGS}
    rest = {k: v for k, v in settings.items() if k.lower() not in STARTUP_SETTINGS}
    if pooler is Pooler.SESSION:
        return Connection(pooler, startup, rest)
    refused = sorted(name for name in given if name.lower() not in STARTUP_SETTINGS)
    if refused:
        raise ConfigurationError(
            f"server setting {refused[0]} cannot be set per connection behind a transaction "
            f"pooler ({POOLER_OPTION}=transaction): set it on the role instead "
            f"(ALTER ROLE ... SET {refused[0]} = ...)"
        )
    return Connection(pooler, startup, options={"statement_cache_size": 0})


async def apply_session(conn: asyncpg.Connection, settings: Mapping[str, str]) -> None:
    """Set ``settings`` for the rest of ``conn``'s session, in one round trip."""
    if settings:
        await conn.execute(
            "SELECT set_config(name, value, false) FROM unnest($1::text[], $2::text[]) "
            "AS s(name, value)",
            list(settings),
            list(settings.values()),
        )


def pooler_hint(exc: BaseException, pooler: Pooler) -> str | None:
    """What to set when ``exc`` says the store is behind a pooler it was not told of (or
    told of wrongly); ``None`` when it does not."""
    text = str(getattr(exc, "message", None) or exc)  # without asyncpg's hint of its own
    if isinstance(exc, asyncpg.ProtocolViolationError) and "startup parameter" in text:
        mode = "session or transaction" if pooler is Pooler.NONE else pooler.value
        return (
            f"a connection pooler (PgBouncer) refused a startup parameter ({text}): add "
            f"?{POOLER_OPTION}=<its pool_mode: {mode}> to the URL, and set other server "
            "settings on the role (ALTER ROLE ... SET)"
        )
    if pooler is not Pooler.TRANSACTION and isinstance(
        exc, asyncpg.DuplicatePreparedStatementError | asyncpg.InvalidSQLStatementNameError
    ):
        return (
            f"a prepared statement met another client's on a shared server session ({text}): "
            "this is a transaction-mode pooler (PgBouncer pool_mode = transaction); add "
            f"?{POOLER_OPTION}=transaction to the URL"
        )
    return None


__all__ = [
    "DIRECT_URL_OPTION",
    "POOLER_OPTION",
    "STARTUP_SETTINGS",
    "Connection",
    "Pooler",
    "apply_session",
    "parse_pooler",
    "plan",
    "pooler_hint",
    "pop_option",
    "url_settings",
]
