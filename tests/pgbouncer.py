"""A real PgBouncer in front of the test PostgreSQL, started and stopped by a test.

Debian's ``pgbouncer`` package (``/usr/sbin/pgbouncer``, often not on ``PATH``). PgBouncer
refuses to run as root, so as root it runs as the ``postgres`` user, with its files in a
folder of its own that user can read. It listens on a free port and passes every database
to the server of ``DURABLE_TEST_POSTGRES_URL``, trusting the URL's user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
RUN_AS = "postgres"


def binary() -> str:
    """The pgbouncer program; the test fails, never skips, when it is not installed."""
    found = shutil.which("pgbouncer") or next(
        (path for path in CANDIDATES if os.access(path, os.X_OK)), None
    )
    if found is None:
        pytest.fail(
            "pgbouncer is required (Debian: apt-get install pgbouncer) and was found neither "
            f"on PATH nor at {', '.join(CANDIDATES)}"
        )
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PgBouncer:
    """A running pgbouncer: :meth:`url` of a database through it."""

    def __init__(self, server_url: str, folder: Path, port: int) -> None:
        parts = urlsplit(server_url)
        self.user = parts.username or "postgres"
        self.folder = folder
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str, **options: str) -> str:
        """A URL of ``database`` through this pgbouncer, with ``options`` in its query."""
        query = "&".join(f"{key}={value}" for key, value in options.items())
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}" + (
            f"?{query}" if query else ""
        )

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def pgbouncer(server_url: str, pool_mode: str, **settings: str | int) -> Iterator[PgBouncer]:
    """Run pgbouncer in ``pool_mode`` in front of ``server_url``'s server until the block
    ends (however it ends); ``settings`` are more lines of its ``[pgbouncer]`` section."""
    program = binary()
    server = urlsplit(server_url)
    folder = Path(tempfile.mkdtemp(prefix="durable-pgbouncer-"))
    bouncer = PgBouncer(server_url, folder, free_port())
    lines = {
        "listen_addr": "127.0.0.1",
        "listen_port": bouncer.port,
        "unix_socket_dir": "",
        "auth_type": "trust",
        "auth_file": folder / "users.txt",
        "pool_mode": pool_mode,
        "logfile": folder / "pgbouncer.log",
        "default_pool_size": 20,
        "max_client_conn": 200,
        **settings,
    }
    (folder / "users.txt").write_text(f'"{bouncer.user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}\n"
        "[pgbouncer]\n" + "".join(f"{key} = {value}\n" for key, value in lines.items())
    )
    as_root = os.geteuid() == 0
    if as_root:  # pgbouncer will not run as root
        owner = pwd.getpwnam(RUN_AS)
        for path in (folder, *folder.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    try:
        bouncer.process = subprocess.Popen(
            [program, str(folder / "pgbouncer.ini")],
            user=RUN_AS if as_root else None,
            group=RUN_AS if as_root else None,
            extra_groups=[] if as_root else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        _until_listening(bouncer)
        yield bouncer
    finally:
        process = bouncer.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # pgbouncer's "shut down now"
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _until_listening(bouncer: PgBouncer) -> None:
    """Return once pgbouncer accepts connections; fail if it exits first."""
    deadline = time.monotonic() + 120  # a guard against a hang, not a bound on speed
    while time.monotonic() < deadline:
        assert bouncer.process is not None
        if bouncer.process.poll() is not None:
            pytest.fail(f"pgbouncer exited at start: {bouncer.log()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", bouncer.port), timeout=1):
                return
        except OSError:
            time.sleep(0.02)
    pytest.fail(f"pgbouncer did not listen on port {bouncer.port}: {bouncer.log()[-2000:]}")
