"""``WorkflowWorker``: claims workflows and runs them, at most ``concurrency`` at once.

The first SIGINT or SIGTERM stops claiming and waits for every in-flight
workflow to settle, then ``run()`` returns. A second signal, or the drain
timeout (``WorkflowConfig.drain_timeout_secs``) passing first, cancels the
in-flight bodies at once, what they run shielded from their own cancellation
included (a saga's compensations, a flush); their leases are left to expire and
another worker reclaims them (``attempts`` goes up), so nothing is lost either
way. After a second signal the process ends within
:data:`~durable_core.runtime.stopping.ABANDON_GRACE_SECS` whatever still runs.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import time
import uuid
from collections import Counter
from collections.abc import Sequence

import anyio
from anyio.abc import TaskGroup

from .. import outages
from ..definitions.queues import Queue, check_queue_name, routes
from ..definitions.registry import Registry, default_registry
from ..durations import utcnow
from ..errors import ClaimNotSupportedError, FrameworkError, StoreUnavailableError
from ..redaction import get_logger
from ..seams.operators import WorkerRecord
from ..seams.plugins import observers
from ..seams.records import ClaimedWorkflow
from ..seams.roles import ROLES, require_roles
from ..seams.store import CancelFeed, Claimer, Store, WorkerRegistry
from .config import WorkflowConfig
from .executor import Executor
from .flight import InFlight
from .group_commit import group_commit
from .leases import start_liveness
from .scheduler import Scheduler, save_declared
from .stopping import exit_soon

logger = get_logger("durable_core.worker")

SUMMARY_SECONDS = 60
"""How often a worker logs, at INFO, how its attempts ended."""

_MAX_CLAIM_BACKOFF = 5.0


def freeze_start_up() -> None:
    """Leave what the process made before its worker began (its imports, the app, the
    store and its compiled statements) out of the garbage collector's full collections,
    which would otherwise walk all of it over and over while workflows run: about a tenth
    of a worker's instructions per workflow (``bench.profile_inprocess``). What is freed
    by reference counting is freed as before; only cycles among these objects would stay.
    ``durable worker`` calls it once its worker is built, before it runs."""
    gc.collect()
    gc.freeze()


def default_worker_id() -> str:
    """``host:pid:random``, unique per worker process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class WorkflowWorker:
    """Drains workflows from a store that can claim (PostgreSQL)."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig | None = None,
        *,
        registry: Registry | None = None,
        worker_id: str | None = None,
        queues: Sequence[str] | None = None,
    ) -> None:
        self.config = (config or WorkflowConfig.from_env()).validate()
        self.registry = registry or default_registry
        self.queues = None if queues is None else [check_queue_name(q) for q in queues]
        """The names of the queues it serves; ``None``: every queue its registry knows."""
        self._running: Counter[str] = Counter()
        self.store = store
        self.worker_id = worker_id or default_worker_id()
        in_flight, min_batch = self.config.pipelining
        self.group = (
            group_commit(
                store,
                step_row_after=self.config.step_row_after_ms / 1000,
                flushes_in_flight=in_flight,
                flush_min_batch=min_batch,
            )
            if self.config.group_commit
            else None
        )
        """Commits its workflows' step rows and settlements together, on a store that can."""
        self.executor = Executor(store, self.config, registry=self.registry, group=self.group)
        self._in_flight = 0
        self._bodies = 0
        """How many of the in-flight workflows' bodies run: each holds a slot. A workflow
        whose body ended frees its slot while its settlement commits, so the next claim
        goes out beside that commit, not after it."""
        self._stopping = False
        self._stop_asked = anyio.Event()
        self._wake = anyio.Event()
        self._slot_free = anyio.Event()
        self._claimed_total = 0
        self._ended: Counter[str] = Counter()
        self._counting_since = time.monotonic()
        """How the attempts since the last summary ended (a status, or ``lost``)."""
        self._abandoned = False
        self._fatal: FrameworkError | None = None
        self.scheduler = Scheduler(store, self.config, self.registry, worker_id=self.worker_id)
        """Starts the workflows of due schedule ticks while the worker claims."""
        self._scheduling = anyio.CancelScope()
        self._started_at = utcnow()
        self._outer: TaskGroup | None = None
        self._flight: InFlight | None = None
        self.started = anyio.Event()
        """Set once the worker has passed its checks and begins to claim."""

    @property
    def in_flight(self) -> int:
        """How many workflows this worker is running now, those settling included."""
        return self._in_flight

    @property
    def abandoned(self) -> bool:
        """True when a second signal stopped the worker without waiting for in-flight work."""
        return self._abandoned

    @property
    def claimed_total(self) -> int:
        """How many workflows this worker has claimed since it started."""
        return self._claimed_total

    def served(self) -> list[Queue]:
        """The queues this worker claims from, with their declared limits."""
        if self.queues is None:
            return self.registry.queues()
        return [self.registry.queue(name) for name in dict.fromkeys(self.queues)]

    def _claimer(self) -> Claimer:
        if isinstance(self.store, Claimer):
            return self.store
        raise ClaimNotSupportedError.for_store(self.store.description)

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once in-flight workflows have settled, or once
        ``config.drain_timeout_secs`` have passed (then it abandons the rest)."""
        self._stopping = True
        self._stop_asked.set()
        self._scheduling.cancel()
        self._wake.set()
        self._slot_free.set()

    def abandon(self, why: str = "asked to stop at once") -> None:
        """Stop at once: cancel the in-flight workflows, what they run shielded from their
        own cancellation included (their leases expire and another worker reclaims them);
        ``run()`` returns with :attr:`abandoned` true. Before ``run()`` has begun, the
        same as :meth:`stop`."""
        if self._outer is None:
            self.stop()
            return
        logger.warning(
            "%s: abandoning %d in-flight workflows; their leases expire and another worker "
            "reclaims them",
            why,
            self._in_flight,
            extra={"worker_id": self.worker_id},
        )
        self._abandoned = True
        if self._flight is not None:
            self._flight.abandon()
        self._outer.cancel_scope.cancel()

    async def run(self, *, handle_signals: bool = False) -> None:
        """Claim and run workflows until :meth:`stop` (or a signal, with ``handle_signals``),
        and start the workflows of due schedule ticks (:mod:`durable_core.runtime.scheduler`),
        having first saved the schedules its registry declares.

        Before claiming anything it raises :class:`DuplicateWorkflowError` when two
        functions share a workflow name, :class:`ClaimNotSupportedError` on a store
        without a claimer, :class:`RoleNotSupportedError` (naming it) on one that lacks a
        role of :mod:`durable_core.seams.roles`, and :class:`SchemaMissingError` or
        :class:`SchemaOutdatedError` when the database is not at this release's
        schema. A :class:`FrameworkError` that stops the worker later (the tables
        dropped under it, say) is raised as itself, never inside an exception group.
        """
        self.registry.assert_no_duplicates()
        claimer = self._claimer()
        require_roles(self.store, ROLES, needed_by="the worker")
        if isinstance(claimer, CancelFeed):
            claimer.on_cancel(self.executor.cancel)
        await self.store.check_schema()
        await save_declared(self.store, self.registry)
        try:
            await self._run(claimer, handle_signals)
        except BaseExceptionGroup as group:
            raise single_error(group) from None
        if self._fatal is not None:
            raise self._fatal
        committed = self.group
        self._log_summary()
        logger.info(
            "worker %s stopped%s",
            self.worker_id,
            ""
            if committed is None
            else f" ({committed.writes} writes in {committed.flushes} flushes)",
            extra={"worker_id": self.worker_id},
        )

    async def _run(self, claimer: Claimer, handle_signals: bool) -> None:
        self._started_at = utcnow()
        logger.info(
            "worker %s started: concurrency %d, lock timeout %ss, poll %sms, %d workflows, "
            "queues %s, event loop %s, on %s",
            self.worker_id,
            self.config.concurrency,
            self.config.lock_timeout_secs,
            self.config.poll_interval_ms,
            len(self.registry.names()),
            ", ".join(queue.name for queue in self.served()),
            type(asyncio.get_running_loop()).__module__.partition(".")[0],
            self.store.description,
            extra={"worker_id": self.worker_id},
        )
        observers().durable_worker_started(
            worker_id=self.worker_id, concurrency=self.config.concurrency
        )
        self.started.set()
        async with anyio.create_task_group() as outer:
            self._outer = outer
            # Before the first beat names its liveness session, and before the first claim.
            await start_liveness(self.store, outer, self.worker_id, self.config, self._claim_again)
            if handle_signals:
                outer.start_soon(self._watch_signals)
            outer.start_soon(self._bound_drain)
            # One task renews every in-flight lease (cancelled with ``outer`` once the
            # workflows have settled), instead of a heartbeat task per workflow.
            outer.start_soon(self.executor.keep_leases)
            outer.start_soon(self._keep_registered)
            outer.start_soon(self._summarize)
            if self.group is not None:
                outer.start_soon(self.group.run)
            outer.start_soon(self._schedule)
            async with InFlight(self._task_failed) as running:
                self._flight = running
                await self._claim_loop(claimer, running)
                logger.info(
                    "worker %s stopping: waiting for %d in-flight workflows (at most %ss)",
                    self.worker_id,
                    self._in_flight,
                    self.config.drain_timeout_secs,
                    extra={"worker_id": self.worker_id},
                )
                observers().durable_worker_stopping(
                    worker_id=self.worker_id, in_flight=self._in_flight
                )
            outer.cancel_scope.cancel()
        await self._leave()

    def record(self) -> WorkerRecord:
        """This worker's row in the registry, as of now."""
        return WorkerRecord(
            worker_id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            concurrency=self.config.concurrency,
            queues=tuple(queue.name for queue in self.served()),
            names=tuple(self.registry.names()),
            in_flight=self._bodies,
            started_at=self._started_at,
            heartbeat_at=self._started_at,
            expires_at=self._started_at,
        )

    async def _keep_registered(self) -> None:
        """Refresh this worker's row every heartbeat interval, on a store that keeps one: it
        stays live a lock timeout after each refresh."""
        if not isinstance(self.store, WorkerRegistry):
            return
        while True:
            try:
                await self.store.beat_worker(self.record(), self.config.lock_timeout_secs)
                outages.reachable(self.store.description, "the worker's heartbeat")
            except StoreUnavailableError as exc:
                outages.unreachable(self.store.description, "the worker's heartbeat", exc)
            except FrameworkError as exc:
                logger.warning(
                    "could not refresh this worker's row: %s",
                    exc,
                    extra={"worker_id": self.worker_id},
                )
            await anyio.sleep(self.config.heartbeat_interval)

    async def _summarize(self) -> None:
        """Every :data:`SUMMARY_SECONDS`, one INFO line of how the attempts ended (each
        attempt's own line is DEBUG, but for failures and retries)."""
        while True:
            await anyio.sleep(SUMMARY_SECONDS)
            self._log_summary()

    def _log_summary(self) -> None:
        ended, self._ended = self._ended, Counter()
        since, self._counting_since = self._counting_since, time.monotonic()
        if ended:
            logger.info(
                "worker %s: %d attempts ended in %ds (%s); %d in flight",
                self.worker_id,
                ended.total(),
                round(self._counting_since - since),
                ", ".join(f"{count} {how}" for how, count in sorted(ended.items())),
                self._in_flight,
                extra={"worker_id": self.worker_id, "ended": dict(ended)},
            )

    async def _leave(self) -> None:
        """Mark this worker gone in the registry (else its row expires a lock timeout after
        its last refresh)."""
        if not isinstance(self.store, WorkerRegistry):
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(0.5 if self._abandoned else 5):
            try:
                await self.store.leave_worker(self.worker_id)
            except FrameworkError as exc:
                logger.warning(
                    "could not mark this worker gone: %s", exc, extra={"worker_id": self.worker_id}
                )

    async def _schedule(self) -> None:
        self._scheduling = anyio.CancelScope()
        if self._stopping:
            return
        with self._scheduling:
            await self.scheduler.run()

    async def _bound_drain(self) -> None:
        """Once asked to stop, give the in-flight workflows ``drain_timeout_secs`` to settle;
        then abandon them (cancelled with the worker's task group first, when they settle
        in time)."""
        await self._stop_asked.wait()
        await anyio.sleep(self.config.drain_timeout_secs)
        self.abandon(f"the drain timeout ({self.config.drain_timeout_secs}s) passed")

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if not self._stopping:
                    logger.info(
                        "received %s: no new claims; finishing %d in-flight workflows within "
                        "%ss (send it again to stop at once)",
                        signal.Signals(signum).name,
                        self._in_flight,
                        self.config.drain_timeout_secs,
                        extra={"worker_id": self.worker_id},
                    )
                    self.stop()
                else:
                    why = f"received {signal.Signals(signum).name} again"
                    self.abandon(why)
                    exit_soon(why)
                    return

    def _task_failed(self, error: BaseException) -> None:
        """A workflow's task let ``error`` escape (a bug, not a workflow's failure): stop
        claiming; ``run()`` raises it once the others have ended."""
        self.stop()

    async def _claim_loop(self, claimer: Claimer, running: InFlight) -> None:
        backoff = 0.1
        served, names = self.served(), self.registry.names()
        # A fleet limit may be what left slots free: a settle here may make room.
        limited = any(queue.fleet_limited for queue in served)
        while not self._stopping:
            free = self._free_slots()
            lanes = routes(served, names, free, self._running)
            if not lanes:
                self._slot_free = anyio.Event()
                await self._slot_free.wait()
                continue
            began = time.perf_counter()
            try:
                claimed = await claimer.claim(
                    worker_id=self.worker_id,
                    limit=free,
                    lease_seconds=self.config.lock_timeout_secs,
                    routes=lanes,
                )
            except StoreUnavailableError as exc:
                outages.unreachable(self.store.description, "claim", exc)
                await self._sleep(backoff)
                backoff = min(backoff * 2, _MAX_CLAIM_BACKOFF)
                continue
            except FrameworkError as exc:
                # Stop claiming and let in-flight work settle; run() raises this error
                # itself once the task groups are left.
                self._fatal = exc
                self._stopping = True
                self._stop_asked.set()
                return
            backoff = 0.1
            outages.reachable(self.store.description, "claim")
            observers().durable_claim_finished(
                worker_id=self.worker_id,
                claimed=len(claimed),
                limit=free,
                seconds=time.perf_counter() - began,
            )
            for item in claimed:
                self._in_flight += 1
                self._bodies += 1
                self._running[item.queue] += 1
                self._claimed_total += 1
                running.start(self._run_one, item)
            if len(claimed) < free and not self._stopping:
                await self._wait_for_work(claimer, settled=limited)

    async def _wait_for_work(self, claimer: Claimer, *, settled: bool) -> None:
        """Until work may be there: a notification, the poll interval, a stop, or (with
        ``settled``) one of this worker's workflows ending."""
        self._wake = anyio.Event()
        self._slot_free = anyio.Event()
        if self._stopping:
            return
        async with anyio.create_task_group() as waiters:

            async def notified() -> None:
                try:
                    await claimer.wait_for_work(self.config.poll_interval)
                except FrameworkError as exc:
                    logger.warning(
                        "waiting for work failed: %s", exc, extra={"worker_id": self.worker_id}
                    )
                    await anyio.sleep(self.config.poll_interval)
                waiters.cancel_scope.cancel()

            async def stopped() -> None:
                await self._wake.wait()
                waiters.cancel_scope.cancel()

            async def freed() -> None:
                await self._slot_free.wait()
                waiters.cancel_scope.cancel()

            waiters.start_soon(notified)
            waiters.start_soon(stopped)
            if settled:
                waiters.start_soon(freed)

    async def _sleep(self, seconds: float) -> None:
        self._wake = anyio.Event()
        if self._stopping:
            return
        with anyio.move_on_after(seconds):
            await self._wake.wait()

    def _claim_again(self) -> None:
        """Wake the claim loop: work may be claimable now (a dead worker's)."""
        self._wake.set()

    def _free_slots(self) -> int:
        """How many workflows to claim now: a slot per body that could run, while at most
        ``concurrency`` more settle (their bodies ended, their settlements commit)."""
        concurrency = self.config.concurrency
        return min(concurrency - self._bodies, 2 * concurrency - self._in_flight)

    async def _run_one(self, claimed: ClaimedWorkflow) -> None:
        holding = True

        def body_ended() -> None:
            nonlocal holding
            if holding:
                holding = False
                self._bodies -= 1
                self._running[claimed.queue] -= 1
                self._slot_free.set()

        try:
            status = await self.executor.run(claimed, body_ended=body_ended)
            self._ended["lost" if status is None else status.value] += 1
        except Exception:
            pass  # the executor logged it, with the attempt's fields
        finally:
            body_ended()
            self._in_flight -= 1
            self._slot_free.set()


def single_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error to raise for ``group``: its first :class:`FrameworkError` when every
    error in it is one, else the group itself (a bug must keep its full traceback)."""
    framework, rest = group.split(FrameworkError)
    if framework is None or rest is not None:
        return group
    leaves: list[BaseException] = [framework]
    while isinstance(leaves[0], BaseExceptionGroup):
        leaves = list(leaves[0].exceptions)
    return leaves[0]
