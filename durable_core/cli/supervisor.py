"""``durable worker --processes N``: one supervisor, N worker processes on one machine.

The supervisor runs no workflow. It starts each worker process by running its own command
line again with ``$DURABLE_SUPERVISED`` set to the process's index (``--processes`` is then
ignored), and talks to it over a socket pair whose end the child inherits:

- the child writes ``started`` once its worker has passed its checks and claims, or
  ``error <message>`` for the one-line error it exits with (the supervisor says it);
- the supervisor writes ``stop`` (drain: finish the in-flight workflows) on the first
  SIGTERM or SIGINT, ``abandon`` on the second (the child then ends within
  :data:`~durable_core.runtime.stopping.ABANDON_GRACE_SECS`; one still there
  :data:`KILL_AFTER` seconds after it, its event loop blocked, is SIGKILLed);
- the child reads the end of the socket as its supervisor's death (even by SIGKILL) and
  drains, so no worker process outlives it.

The processes start together (``--migrate`` is safe in each: the schema is applied under a
lock). Until one has started, a process that fails to boot stops them all: a bad ``--app`` or
an unreachable database is one error line, and exit 2. Later, a process that dies is started
again after a delay that doubles from 0.5 s to 30 s while it keeps dying within 30 s of its
start; five boots failing in a row stop the supervisor (exit 2).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from ..errors import ConfigurationError
from ..redaction import get_logger
from ..runtime.stopping import ABANDON_GRACE_SECS, exit_soon

if TYPE_CHECKING:
    from ..runtime.worker import WorkflowWorker

logger = get_logger("durable_core.supervisor")

SUPERVISED_ENV = "DURABLE_SUPERVISED"
"""Set in a worker process the supervisor started: its index, 0 to N-1."""
SUPERVISOR_FD_ENV = "DURABLE_SUPERVISOR_FD"
"""The file descriptor of the child's end of its socket to the supervisor."""

FIRST_DELAY = 0.5
MAX_DELAY = 30.0
MAX_BOOT_FAILURES = 5
"""Boots failing in a row (a process exiting before it claims) that stop the supervisor."""
KILL_AFTER = ABANDON_GRACE_SECS + 0.2
"""Seconds after ``abandon`` when a worker process still there is SIGKILLed."""

_STARTED = b"started\n"
_ERROR = b"error "
_STOP = b"stop\n"
_ABANDON = b"abandon\n"


def process_count(text: str) -> int:
    """The value of ``--processes``: a number from 1, or ``auto`` (one per core this
    process may run on)."""
    if text.strip().lower() == "auto":
        return cores()
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigurationError(f"--processes takes a number from 1 or 'auto', got {text!r}")
    return count


def cores() -> int:
    """How many CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def child_command(argv: Sequence[str] | None) -> list[str]:
    """The command line that runs this command again: the interpreter, its options and
    ``-m module`` or script as this process was started (``argv`` None), else ``python -m
    durable_core``; then the arguments, without ``--processes``."""
    if argv is None:
        argv = sys.argv[1:]
        head = sys.orig_argv[1 : len(sys.orig_argv) - len(argv)]
    else:
        head = ["-m", "durable_core"]
    rest: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--processes":
            skip = True
        elif not arg.startswith("--processes="):
            rest.append(arg)
    return [sys.executable, *head, *rest]


@dataclass
class _Slot:
    """One worker process the supervisor keeps running."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    channel: socket.socket | None = None
    started: bool = False
    spawned_at: float = 0.0
    delay: float = FIRST_DELAY
    restart_at: float | None = None
    buffer: bytes = b""
    error: str | None = None
    """The one-line error it said it exits with."""
    codes: list[int] = field(default_factory=list)


class Supervisor:
    """Keeps ``count`` worker processes running ``command`` until SIGTERM or SIGINT."""

    def __init__(self, command: Sequence[str], count: int) -> None:
        self.command = list(command)
        self.slots = [_Slot(index) for index in range(count)]
        self.stopping = False
        self.fatal: str | None = None
        self._signals = 0
        self._booted = False
        self._failures = 0
        self._kill_at: float | None = None
        self._selector = selectors.DefaultSelector()

    def run(self) -> int:
        """Start the processes and supervise them; the exit code: 0 once every process has
        drained, 1 when one did not (it abandoned its workflows or was killed), 2 when they
        could not boot (then one line on stderr says why)."""
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)
        previous = {signum: signal.signal(signum, _noop) for signum in handled}
        old_fd = signal.set_wakeup_fd(wake_write.fileno())
        self._selector.register(wake_read, selectors.EVENT_READ, None)
        logger.debug("supervisor %d: starting %d worker processes", os.getpid(), len(self.slots))
        try:
            for slot in self.slots:
                if self.fatal is None:
                    self._spawn(slot)
            while not self._done():
                for key, _ in self._selector.select(self._timeout()):
                    if key.data is None:
                        self._on_signals(wake_read)
                    else:
                        self._on_message(key.data)
                self._reap()
                self._restart_due()
                self._kill_due()
        finally:
            signal.set_wakeup_fd(old_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._selector.close()
            wake_read.close()
            wake_write.close()
        if self.fatal is not None:
            print(f"durable: error: {self.fatal}", file=sys.stderr)
            return 2
        codes = [code for slot in self.slots for code in slot.codes[-1:]]
        return 0 if all(code == 0 for code in codes) else 1

    def _done(self) -> bool:
        return (self.stopping or self.fatal is not None) and all(
            slot.proc is None for slot in self.slots
        )

    def _timeout(self) -> float | None:
        due = [slot.restart_at for slot in self.slots if slot.restart_at is not None]
        if self._kill_at is not None:
            due.append(self._kill_at)
        return max(min(due) - time.monotonic(), 0.0) if due else None

    def _spawn(self, slot: _Slot) -> None:
        ours, theirs = socket.socketpair()
        env = {
            **os.environ,
            SUPERVISED_ENV: str(slot.index),
            SUPERVISOR_FD_ENV: str(theirs.fileno()),
        }
        try:
            slot.proc = subprocess.Popen(
                self.command, env=env, pass_fds=(theirs.fileno(),), process_group=0
            )
        except OSError as exc:  # no program to run, no process left to fork: say it once
            ours.close()
            self._fail(f"cannot start worker process {slot.index}: {exc.strerror or exc}")
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        slot.channel, slot.started, slot.buffer, slot.error = ours, False, b"", None
        slot.spawned_at, slot.restart_at = time.monotonic(), None
        self._selector.register(ours, selectors.EVENT_READ, slot)

    def _on_signals(self, wake: socket.socket) -> None:
        try:
            received = wake.recv(512)
        except BlockingIOError:
            return
        for signum in received:
            if signum in (signal.SIGTERM, signal.SIGINT):
                self._stop(signal.Signals(signum).name)

    def _stop(self, name: str) -> None:
        self._signals += 1
        live = [slot for slot in self.slots if slot.proc is not None]
        if self._signals == 1:
            logger.info(
                "received %s: draining %d worker processes (send it again to stop them at once)",
                name,
                len(live),
            )
        else:
            logger.warning("received %s again: stopping the workers at once", name)
            if self._kill_at is None:
                self._kill_at = time.monotonic() + KILL_AFTER
        self.stopping = True
        for slot in self.slots:
            slot.restart_at = None
        self._tell_all(_STOP if self._signals == 1 else _ABANDON)

    def _kill_due(self) -> None:
        """SIGKILL the worker processes still there :data:`KILL_AFTER` seconds after they
        were told to stop at once (their leases expire; another worker reclaims)."""
        if self._kill_at is None or time.monotonic() < self._kill_at:
            return
        self._kill_at = None
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                logger.warning(
                    "worker process %d (pid %d) still runs %gs after it was told to stop at "
                    "once: killing it",
                    slot.index,
                    slot.proc.pid,
                    KILL_AFTER,
                )
                slot.proc.kill()

    def _tell_all(self, message: bytes) -> None:
        for slot in self.slots:
            if slot.channel is not None:
                with contextlib.suppress(OSError):  # it is exiting: the reaper sees it
                    slot.channel.send(message)

    def _on_message(self, slot: _Slot) -> bool:
        """Read what the process wrote; whether there may be more."""
        if slot.channel is None:
            return False
        try:
            data = slot.channel.recv(512)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close_channel(slot)
            return False
        slot.buffer += data
        while b"\n" in slot.buffer:
            line, _, slot.buffer = slot.buffer.partition(b"\n")
            if line + b"\n" == _STARTED and not slot.started:
                slot.started = self._booted = True
                self._failures = 0
                assert slot.proc is not None
                logger.info("worker process %d started (pid %d)", slot.index, slot.proc.pid)
            elif line.startswith(_ERROR):
                slot.error = line.removeprefix(_ERROR).decode(errors="replace")
        return True

    def _close_channel(self, slot: _Slot) -> None:
        if slot.channel is not None:
            self._selector.unregister(slot.channel)
            slot.channel.close()
            slot.channel = None

    def _reap(self) -> None:
        for slot in self.slots:
            if slot.proc is None:
                continue
            code = slot.proc.poll()
            if code is None:
                continue
            while self._on_message(slot):  # what it wrote before it exited
                pass
            self._close_channel(slot)
            pid, slot.proc = slot.proc.pid, None
            slot.codes.append(code)
            self._exited(slot, pid, code)

    def _exited(self, slot: _Slot, pid: int, code: int) -> None:
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
        if slot.error:
            how = f"{how}: {slot.error}"
        if self.fatal is not None:  # stopped for it: said once, as the exit's one line
            logger.debug("worker process %d (pid %d) %s", slot.index, pid, how)
            return
        if self.stopping:
            log = logger.info if code == 0 else logger.warning
            log("worker process %d (pid %d) %s", slot.index, pid, how)
            return
        if not slot.started:
            if not self._booted:
                self._fail(slot.error or f"worker process {slot.index} {how} before it started")
                return
            self._failures += 1
            if self._failures >= MAX_BOOT_FAILURES:
                self._fail(
                    f"worker processes failed to boot {self._failures} times in a row "
                    f"(the last {how})"
                )
                return
        lived = time.monotonic() - slot.spawned_at
        if lived >= MAX_DELAY:
            slot.delay = FIRST_DELAY
        logger.warning(
            "worker process %d (pid %d) %s%s; starting it again in %gs",
            slot.index,
            pid,
            how,
            "" if slot.started else " before it started",
            slot.delay,
        )
        slot.restart_at = time.monotonic() + slot.delay
        slot.delay = min(slot.delay * 2, MAX_DELAY)

    def _fail(self, message: str) -> None:
        self.fatal = message
        for slot in self.slots:
            slot.restart_at = None
        self._tell_all(_STOP)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.restart_at is not None and slot.restart_at <= now and not self.stopping:
                self._spawn(slot)


def _noop(signum: int, frame: object) -> None:
    """A handler that lets the signal's number reach the wake-up socket."""


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True)
class Supervised:
    """A worker process's side of its supervisor: its index and its socket."""

    index: int
    channel: socket.socket

    @classmethod
    def from_env(cls) -> Supervised | None:
        """The supervisor this process was started by, if any (and then the socket is
        taken: a process started by this one does not see it)."""
        index = os.environ.pop(SUPERVISED_ENV, None)
        fd = os.environ.pop(SUPERVISOR_FD_ENV, None)
        if index is None or fd is None:
            return None
        channel = socket.socket(fileno=int(fd))
        channel.set_inheritable(False)
        channel.setblocking(False)
        return cls(int(index), channel)

    async def serve(self, worker: WorkflowWorker) -> None:
        """Tell the supervisor once ``worker`` claims; stop or abandon it when asked, and
        stop it when the supervisor is gone."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._announce, worker)
            await self._listen(worker)
            tasks.cancel_scope.cancel()

    async def _announce(self, worker: WorkflowWorker) -> None:
        await worker.started.wait()
        with contextlib.suppress(OSError):  # the supervisor is gone: _listen reads the end
            self.channel.send(_STARTED)

    async def _listen(self, worker: WorkflowWorker) -> None:
        buffer = b""
        while True:
            await anyio.wait_readable(self.channel)
            try:
                data = self.channel.recv(512)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._gone(worker)
                return
            buffer += data
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                self._obey(worker, line + b"\n")

    def _gone(self, worker: WorkflowWorker) -> None:
        logger.warning(
            "the supervisor is gone: no new claims; finishing the in-flight workflows",
            extra={"worker_id": worker.worker_id},
        )
        worker.stop()

    @staticmethod
    def _obey(worker: WorkflowWorker, message: bytes) -> None:
        if message == _STOP:
            worker.stop()
        elif message == _ABANDON:
            why = "the supervisor was asked to stop at once"
            worker.abandon(why)
            exit_soon(why)

    def report(self, message: str) -> None:
        """Give the supervisor the one-line error this process exits with (printed here
        when the supervisor is gone)."""
        try:
            self.channel.setblocking(True)
            self.channel.sendall(_ERROR + message.encode() + b"\n")
        except OSError:
            print(f"durable: error: {message}", file=sys.stderr)

    def close(self) -> None:
        """Close this end of the socket."""
        self.channel.close()
