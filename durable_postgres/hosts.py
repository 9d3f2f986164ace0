"""The hosts of a PostgreSQL URL: one (``host:port``) or several (``h1:p1,h2:p2``).

A URL that names several hosts (libpq's and asyncpg's form for a primary and its
standbys) is tried host by host; ``?target_session_attrs=read-write`` makes a
connection skip a host that is a standby. Ports are checked here, since a URL
parser that reads one ``host:port`` cannot read the list.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from durable_core.errors import InvalidDatabaseURLError
from durable_core.sql.urls import MAX_PORT


def split_hosts(dsn: str) -> tuple[str, str | None]:
    """``(dsn with its first host only, the whole host list)`` for a URL naming several
    hosts, each port checked; ``(dsn, None)`` for a URL naming one."""
    netloc = urlsplit(dsn).netloc
    userinfo, at, hostlist = netloc.rpartition("@")
    if "," not in hostlist:
        return dsn, None
    hosts = hostlist.split(",")
    for host in hosts:
        _check_port(host, dsn)
    first = f"{userinfo}{at}{hosts[0]}"
    return dsn.replace(netloc, first, 1), hostlist


def _check_port(host: str, dsn: str) -> None:
    name, colon, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not colon:
        name = host
    if not name:
        raise InvalidDatabaseURLError(f"PostgreSQL URL: an empty host in {hosts_of(dsn)!r}")
    if colon and not (port.isdigit() and 1 <= int(port) <= MAX_PORT):
        raise InvalidDatabaseURLError(
            f"PostgreSQL URL: port {port!r} of host {name!r} is not a port number (1 to {MAX_PORT})"
        )


def hosts_of(dsn: str) -> str:
    """The host list of ``dsn`` (no credentials)."""
    return urlsplit(dsn).netloc.rpartition("@")[2]


def named_hosts(dsn: str) -> int:
    """How many hosts ``dsn`` names in its authority or in its ``?host=`` parameter."""
    parts = urlsplit(dsn)
    query_hosts = [
        value
        for key, _, value in (item.partition("=") for item in parts.query.split("&"))
        if key == "host"
    ]
    listed = query_hosts[-1] if query_hosts else parts.netloc.rpartition("@")[2]
    return len([host for host in listed.split(",") if host]) or 1


def with_hosts(url: str, hostlist: str) -> str:
    """``url`` (a URL naming one host) naming ``hostlist`` instead."""
    parts = urlsplit(url)
    userinfo, at, _host = parts.netloc.rpartition("@")
    return parts._replace(netloc=f"{userinfo}{at}{hostlist}").geturl()


def writable_by_default(dsn: str, options: dict[str, object]) -> None:
    """Ask for a read-write server (``target_session_attrs``) when ``dsn`` names several
    hosts and neither it, ``options`` nor ``PGTARGETSESSIONATTRS`` says which to take: the
    store writes, so a standby among them is skipped rather than written to."""
    if named_hosts(dsn) < 2 or "target_session_attrs" in options:
        return
    if "target_session_attrs=" in urlsplit(dsn).query or os.environ.get("PGTARGETSESSIONATTRS"):
        return
    options["target_session_attrs"] = "read-write"
