"""PostgreSQL clusters of a test's own, made with Debian's ``postgresql-common``.

A cluster is made on a free port when a test first needs it and dropped when the
session ends; a cluster left by a run that crashed (its pytest process is gone) is
dropped first. Clusters are named ``<prefix>_<pid>`` (``<prefix>_<pid>_<role>``).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from durable_postgres.embedded import pid_alive


def version() -> str:
    """The PostgreSQL version the clusters are made with (the newest installed)."""
    return sorted(os.listdir("/etc/postgresql"))[-1]


def clusters() -> dict[str, str]:
    """The clusters of this PostgreSQL version: name to status."""
    listing = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True)
    return {
        parts[1]: parts[3]
        for parts in (line.split() for line in listing.stdout.splitlines())
        if len(parts) > 3 and parts[0] == version()
    }


def drop(name: str) -> None:
    """Stop and drop the cluster ``name``."""
    subprocess.run(
        ["pg_dropcluster", "--stop", version(), name], check=True, capture_output=True, timeout=120
    )


def drop_leftovers(prefix: str) -> None:
    """Drop the clusters named after ``prefix`` whose pytest process is gone (a crashed run)."""
    for name in clusters():
        owner = name.removeprefix(f"{prefix}_").partition("_")[0]
        if name == prefix or (
            name.startswith(f"{prefix}_") and owner.isdigit() and not pid_alive(int(owner))
        ):
            drop(name)


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Cluster:
    """A PostgreSQL cluster this session made, on a free port."""

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    @property
    def data(self) -> Path:
        return Path("/var/lib/postgresql") / version() / self.name

    def ctl(self, *args: str) -> None:
        """``pg_ctlcluster <version> <name> <args>``."""
        subprocess.run(["pg_ctlcluster", version(), self.name, *args], check=True, timeout=120)

    def create(self, *, start: bool = True, options: tuple[str, ...] = ()) -> None:
        """Make the cluster (trust authentication), started unless ``start`` is false."""
        command = ["pg_createcluster", version(), self.name, "-p", str(self.port)]
        for option in options:
            command += ["-o", option]
        if start:
            command.append("--start")
        subprocess.run(
            [*command, "--", "--auth=trust"], check=True, capture_output=True, timeout=120
        )

    def drop_if_there(self) -> None:
        if self.name in clusters():
            drop(self.name)
