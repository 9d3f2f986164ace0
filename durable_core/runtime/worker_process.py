"""``WorkerProcess``: a real ``durable worker`` in a child process, for tests.

It runs ``python -m durable_core worker`` on a database with the modules you
name, returns from :meth:`WorkerProcess.start` once the worker has checked the
schema and begun to claim, and :meth:`WorkerProcess.stop` ends it (SIGTERM,
then SIGKILL if it does not finish in time)::

    with WorkerProcess(url, ["myapp.workflows"], log_path=tmp / "worker.log"):
        ...  # start workflows; the worker runs them

The child sees this process's environment and ``sys.path``, so the modules a
test imports, the worker imports too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from ..errors import WorkerStartError

_POLL = 0.05
_LOG_TAIL = 4000


class WorkerProcess:
    """One ``durable worker`` child process, with its output in ``log_path``."""

    def __init__(
        self,
        database_url: str,
        apps: Sequence[str],
        *,
        log_path: Path,
        bootstrap: str | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.database_url = database_url
        self.apps = list(apps)
        self.log_path = log_path
        self.bootstrap = bootstrap
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.worker_id = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        state = "not started" if self.process is None else f"pid {self.process.pid}"
        return f"WorkerProcess({self.worker_id}, {state}, log {self.log_path})"

    @property
    def command(self) -> list[str]:
        """The command line the worker runs."""
        command = [sys.executable, "-m", "durable_core", "worker", "--worker-id", self.worker_id]
        for app in self.apps:
            command += ["--app", app]
        if self.bootstrap is not None:
            command += ["--bootstrap", self.bootstrap]
        return command

    def environment(self) -> dict[str, str]:
        """This process's environment, pointed at the database, with ``sys.path`` importable."""
        path = [entry for entry in sys.path if entry]
        return {
            **os.environ,
            "WORKFLOW_POLL_INTERVAL_MS": os.environ.get("WORKFLOW_POLL_INTERVAL_MS", "200"),
            **self.env,
            "DURABLE_DATABASE_URL": self.database_url,
            "PYTHONPATH": os.pathsep.join(path),
        }

    def start(self) -> Self:
        """Start the worker; return once it claims, or raise :class:`WorkerStartError`."""
        if self.process is not None:
            raise WorkerStartError(f"{self!r} was started already")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command,
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        ready = f"worker {self.worker_id} started"
        deadline = time.monotonic() + self.start_timeout
        while ready not in self.log():
            if self.process.poll() is not None:
                self._close_log()
                raise WorkerStartError(
                    f"the worker exited with {self.process.returncode} before it started:\n"
                    + self.log()[-_LOG_TAIL:]
                )
            if time.monotonic() > deadline:
                self.stop()
                raise WorkerStartError(
                    f"the worker did not start within {self.start_timeout}s:\n"
                    + self.log()[-_LOG_TAIL:]
                )
            time.sleep(_POLL)
        return self

    def running(self) -> bool:
        """Whether the process is alive."""
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """Everything the worker has written so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop it: SIGTERM lets in-flight workflows finish, SIGKILL follows after ``timeout``
        seconds. Return its exit code (``None`` if it was never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_log()
        return self.process.returncode

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
