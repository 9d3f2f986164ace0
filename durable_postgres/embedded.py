"""A local PostgreSQL with no set-up, from the server binaries in the ``pgserver`` wheel.

Install with ``pip install durable-core[embedded]``::

    async with EmbeddedPostgres() as pg:          # data in ./.durable/pgdata
        async with PostgresStore(pg.url) as store:
            ...

The server listens on a unix socket only, no TCP port (the socket sits in the
data folder, or in a per-user runtime folder when that path is too long), so
several projects on one machine never collide. ``start()`` initializes a
fresh folder or restarts the server on an existing one, and reuses a server
already running on it; ``stop()`` shuts it down once no other process (or
other ``EmbeddedPostgres`` in this one) still uses it.

Running as root: PostgreSQL refuses to run as root, so pgserver creates a
system user ``pgserver`` (with ``useradd``), gives it the data folder, makes
the folders above it and its own binaries readable and traversable by others
(``chmod o+rx``), and runs ``initdb``/``pg_ctl`` as that user.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import anyio
import anyio.to_thread

from durable_core.errors import ConfigurationError, StoreError

DEFAULT_DATA_DIR = Path(".durable") / "pgdata"
"""The data folder used when none is given, relative to the current directory."""

_users: dict[Path, int] = {}
_users_lock = threading.Lock()


def _pgserver() -> ModuleType:
    pg_logger = logging.getLogger("pgserver")
    if pg_logger.level == logging.NOTSET:
        # pgserver logs every command it runs, with its full output, at INFO.
        pg_logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, root).
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:
        raise ConfigurationError(
            "the embedded PostgreSQL needs the pgserver package: "
            "pip install 'durable-core[embedded]' (or set DURABLE_DATABASE_URL)"
        ) from exc
    return pgserver


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _forget_dead_handles(server: Any) -> None:
    """Drop processes that died without stopping from pgserver's list of users.

    pgserver stops the server only when the last process on that list lets go,
    so one crashed process would otherwise keep it running forever.
    """
    try:
        with type(server)._lock:
            handles = server.global_process_id_list
            pids = handles.get()
            alive = [pid for pid in pids if pid_alive(pid)]
            if alive != pids:
                handles.put(alive)
    except Exception:  # best effort: worst case the server keeps running
        return


def _url_for(info: Any, database: str) -> str:
    """The URL of ``database`` on the server described by pgserver's postmaster info."""
    name = quote(database, safe="")
    if info.socket_dir is not None:
        port = "" if info.port in (None, 5432) else f"&port={info.port}"
        return f"postgresql://postgres@/{name}?host={quote(str(info.socket_dir))}{port}"
    return f"postgresql://postgres@{info.hostname}:{info.port}/{name}"


_START_ROUNDS = 6
"""How many times pgserver is asked to start the server: its ``pg_ctl start`` gives up
after 10 seconds, which a loaded machine can need, while the server goes on starting."""


def _get_server(pgserver: Any, data_dir: Path) -> Any:
    """pgserver's server for ``data_dir``, started (or found started) by it."""
    for _ in range(_START_ROUNDS - 1):
        try:
            return pgserver.get_server(data_dir, cleanup_mode="stop")
        except subprocess.TimeoutExpired:
            time.sleep(1.0)  # the server may be up by now: the next round finds it running
    return pgserver.get_server(data_dir, cleanup_mode="stop")


class EmbeddedPostgres:
    """A PostgreSQL server in a local data folder (default ``./.durable/pgdata``).

    ``database`` is created on first start when it is not ``postgres``.
    """

    def __init__(
        self, data_dir: str | os.PathLike[str] | None = None, *, database: str = "postgres"
    ) -> None:
        self.data_dir = Path(data_dir if data_dir is not None else DEFAULT_DATA_DIR).absolute()
        self.database = database
        self._server: Any = None
        self._info: Any = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The connection URL (a unix socket; asyncpg and ``PostgresStore`` accept it)."""
        if self._url is None:
            raise StoreError(f"the embedded PostgreSQL in {self.data_dir} is not started")
        return self._url

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._server is not None

    async def start(self) -> str:
        """Start (or reuse) the server and return its URL."""
        if self._server is None:
            await anyio.to_thread.run_sync(self.start_blocking)
            if self.database != "postgres":
                try:
                    await self._create_database()
                except BaseException:
                    await self.stop()
                    raise
        return self.url

    async def stop(self) -> None:
        """Stop the server, unless another user of the same data folder remains."""
        await anyio.to_thread.run_sync(self.stop_blocking)

    async def __aenter__(self) -> EmbeddedPostgres:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def start_blocking(self) -> str:
        """:meth:`start` for synchronous code (blocks until the server accepts connections).

        Does not create ``database``.
        """
        if self._server is not None:
            return self.url
        pgserver = _pgserver()
        data_dir = self.data_dir.resolve()
        try:
            data_dir.parent.mkdir(parents=True, exist_ok=True)
            with _users_lock:
                server = _get_server(pgserver, data_dir)
                _users[data_dir] = _users.get(data_dir, 0) + 1
            info = server.get_postmaster_info()
        except Exception as exc:
            raise StoreError(self._start_failure(data_dir, exc)) from exc
        self._server, self._info = server, info
        self._url = _url_for(info, self.database)
        return self._url

    def stop_blocking(self) -> None:
        """:meth:`stop` for synchronous code."""
        server, self._server = self._server, None
        self._url = self._info = None
        if server is None:
            return
        data_dir = self.data_dir.resolve()
        with _users_lock:
            remaining = _users.get(data_dir, 1) - 1
            if remaining > 0:
                _users[data_dir] = remaining
                return
            _users.pop(data_dir, None)
            _forget_dead_handles(server)
            server.cleanup()

    async def _create_database(self) -> None:
        import asyncpg

        try:
            conn = await asyncpg.connect(_url_for(self._info, "postgres"))
            try:
                exists = await conn.fetchval(
                    "SELECT 1 FROM pg_database WHERE datname = $1", self.database
                )
                if not exists:
                    quoted = self.database.replace('"', '""')
                    await conn.execute(f'CREATE DATABASE "{quoted}"')
            finally:
                await conn.close()
        except Exception as exc:
            raise StoreError(
                f"cannot create database {self.database!r} in the embedded PostgreSQL "
                f"in {self.data_dir}: {exc!r}"
            ) from exc

    @staticmethod
    def _start_failure(data_dir: Path, exc: BaseException) -> str:
        message = f"the embedded PostgreSQL in {data_dir} did not start: {exc!r}"
        log = data_dir / "log"
        if log.exists():
            message += f"; see the server log at {log}"
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            message += (
                ". As root, pgserver runs the server as the system user 'pgserver' (created "
                "with useradd), which must be able to reach and own the data folder"
            )
        return message
