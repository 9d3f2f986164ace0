"""Prometheus metrics (the ``[metrics]`` extra, prometheus-client).

- :class:`PrometheusObserver` is an observer plugin: the worker's hooks feed its
  counters and histograms (workflows in flight, starts, settles by outcome, step and
  attempt durations, queue wait, claim and group-commit flush figures).
- :class:`StoreMetrics` reads the store when scraped: the backlog by queue, workflow
  and status, the age of the oldest pending workflow, and (optionally) the attempts
  that ended, by queue and outcome: one query each, the backlog's over the unfinished
  rows only (the status index, as ``durable stats``), the ended attempts' over those
  after the last scrape's cursor.
- :func:`metrics_endpoint` serves both on ``http://HOST:PORT/metrics`` beside a
  worker (``durable worker --metrics-port``); the dashboard serves the store's on its
  own ``/metrics`` route (:func:`store_exposition`).

Only this module and :mod:`durable_core.dashboard.app` import ``prometheus_client``.
"""

from __future__ import annotations

import errno
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
from anyio.from_thread import BlockingPortal

from ..caller.client import DurableClient
from ..errors import ConfigurationError, FrameworkError
from ..redaction import get_logger
from ..seams.events import AttemptEvent
from ..seams.hookspecs import hookimpl
from ..seams.plugins import plugin_manager
from ..seams.records import BacklogRecord, WorkflowStatus
from ..seams.store import Store

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        generate_latest,
        start_http_server,
    )
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
except ModuleNotFoundError as exc:
    raise ConfigurationError(
        f"metrics need prometheus-client, which is not installed ({exc.name}): "
        "pip install 'durable-core[metrics]'"
    ) from None

logger = get_logger("durable_core.metrics")

PLUGIN_NAME = "durable_core.metrics"
"""The name :func:`instrument` registers its observer under."""

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The content type of an exposition (:func:`store_exposition`, ``generate_latest``)."""

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
WRITE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

SCRAPE_TIMEOUT = 5.0
"""Seconds a scrape waits for the store before it reports ``durable_store_up 0``."""


@dataclass
class _Attempt:
    name: str
    attempts: int
    began: float = field(default_factory=time.perf_counter)
    steps: dict[int, tuple[str, float]] = field(default_factory=dict)
    """The steps running now, by index: their name and when they began."""


class PrometheusObserver:
    """Counts what the workers of this process do, in ``registry`` (a new one by default).

    Every figure is this process's own; the ``instance`` label Prometheus adds tells
    the workers apart.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._open: dict[str, _Attempt] = {}
        """The attempts running in this process, by workflow id."""
        on = self.registry
        self.in_flight = Gauge(
            "durable_workflows_in_flight", "Workflow attempts running in this process.", registry=on
        )
        self.in_flight.set_function(lambda: len(self._open))
        self._slots: dict[str, int] = {}
        """The concurrency of each worker of this process that claims."""
        self.slots = Gauge(
            "durable_worker_slots",
            "Workflows the workers of this process that claim may run at once.",
            registry=on,
        )
        self.slots.set_function(lambda: sum(self._slots.values()))
        self.starts = Counter(
            "durable_workflow_starts",
            "Workflows started from this process (by clients, parents and schedules).",
            ["workflow"],
            registry=on,
        )
        self.settles = Counter(
            "durable_workflow_settles",
            "Attempts that ended in this process, by outcome: succeeded, failed and cancelled "
            "(the workflow ended), retry (another attempt follows), waiting (it suspended), "
            "lease_lost, unsettled.",
            ["workflow", "outcome"],
            registry=on,
        )
        self.attempt_duration = Histogram(
            "durable_workflow_attempt_duration_seconds",
            "How long an attempt ran, from its claim to its end, by outcome.",
            ["workflow", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=on,
        )
        self.step_duration = Histogram(
            "durable_step_duration_seconds",
            "How long a step's body ran, per try (a step replayed from its cache is not timed).",
            ["workflow", "step", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=on,
        )
        self.queue_wait = Histogram(
            "durable_workflow_queue_wait_seconds",
            "How long a workflow was due before a worker claimed it.",
            ["workflow"],
            buckets=DURATION_BUCKETS,
            registry=on,
        )
        self.claim_duration = Histogram(
            "durable_claim_duration_seconds",
            "How long one claim statement took.",
            buckets=DURATION_BUCKETS,
            registry=on,
        )
        self.claimed = Counter(
            "durable_claimed_workflows",
            "Workflows the workers of this process claimed.",
            registry=on,
        )
        self.flush_writes = Histogram(
            "durable_group_commit_flush_writes",
            "Row writes one group-commit flush carried.",
            buckets=WRITE_BUCKETS,
            registry=on,
        )
        self.flush_duration = Histogram(
            "durable_group_commit_flush_duration_seconds",
            "How long one group-commit flush's statement took.",
            buckets=DURATION_BUCKETS,
            registry=on,
        )

    # -- starts and claims ------------------------------------------------------------------

    @hookimpl
    def durable_worker_started(self, worker_id: str, concurrency: int) -> None:
        self._slots[worker_id] = concurrency

    @hookimpl
    def durable_worker_stopping(self, worker_id: str) -> None:
        self._slots.pop(worker_id, None)

    @hookimpl
    def durable_workflow_enqueued(self, workflow_name: str) -> None:
        self.starts.labels(workflow_name).inc()

    @hookimpl
    def durable_claim_finished(self, claimed: int, seconds: float) -> None:
        self.claim_duration.observe(seconds)
        self.claimed.inc(claimed)

    @hookimpl
    def durable_group_commit_flushed(self, writes: int, seconds: float) -> None:
        self.flush_writes.observe(writes)
        self.flush_duration.observe(seconds)

    @hookimpl
    def durable_workflow_claimed(self, attempt: AttemptEvent, queue_wait: float | None) -> None:
        self._open[attempt.workflow_id] = _Attempt(attempt.workflow_name, attempt.attempts)
        if queue_wait is not None:
            self.queue_wait.labels(attempt.workflow_name).observe(queue_wait)

    # -- attempts' ends -----------------------------------------------------------------------

    def _end(self, workflow_id: str, attempts: int, outcome: str) -> None:
        attempt = self._open.get(workflow_id)
        if attempt is None or attempt.attempts != attempts:
            return
        del self._open[workflow_id]
        self.settles.labels(attempt.name, outcome).inc()
        seconds = time.perf_counter() - attempt.began
        self.attempt_duration.labels(attempt.name, outcome).observe(seconds)

    @hookimpl
    def durable_workflow_succeeded(self, attempt: AttemptEvent) -> None:
        self._end(attempt.workflow_id, attempt.attempts, "succeeded")

    @hookimpl
    def durable_workflow_failed(self, attempt: AttemptEvent) -> None:
        self._end(attempt.workflow_id, attempt.attempts, "failed")

    @hookimpl
    def durable_retry_scheduled(self, attempt: AttemptEvent) -> None:
        self._end(attempt.workflow_id, attempt.attempts, "retry")

    @hookimpl
    def durable_workflow_waiting(self, attempt: AttemptEvent) -> None:
        self._end(attempt.workflow_id, attempt.attempts, "waiting")

    @hookimpl
    def durable_workflow_cancelled(self, attempt: AttemptEvent) -> None:
        self._end(attempt.workflow_id, attempt.attempts, "cancelled")

    @hookimpl
    def durable_lease_lost(self, attempt: AttemptEvent) -> None:
        self._end(attempt.workflow_id, attempt.attempts, "lease_lost")

    @hookimpl
    def durable_attempt_unsettled(self, attempt: AttemptEvent) -> None:
        self._end(attempt.workflow_id, attempt.attempts, "unsettled")

    # -- steps ------------------------------------------------------------------------------

    @hookimpl
    def durable_step_started(self, attempt: AttemptEvent, step_index: int, step_name: str) -> None:
        open_ = self._open.get(attempt.workflow_id)
        if open_ is not None and open_.attempts == attempt.attempts:
            open_.steps[step_index] = (step_name, time.perf_counter())

    def _step_ended(self, workflow_id: str, attempts: int, step_index: int, outcome: str) -> None:
        attempt = self._open.get(workflow_id)
        if attempt is None or attempt.attempts != attempts:
            return
        began = attempt.steps.pop(step_index, None)
        if began is not None:
            step, at = began
            self.step_duration.labels(attempt.name, step, outcome).observe(time.perf_counter() - at)

    @hookimpl
    def durable_step_succeeded(self, attempt: AttemptEvent, step_index: int, cached: bool) -> None:
        if not cached:
            self._step_ended(attempt.workflow_id, attempt.attempts, step_index, "succeeded")

    @hookimpl
    def durable_step_failed(self, attempt: AttemptEvent, step_index: int) -> None:
        self._step_ended(attempt.workflow_id, attempt.attempts, step_index, "failed")


@dataclass(frozen=True)
class StoreReading:
    """What one scrape read from the store (``backlog`` is ``None`` when it did not answer)."""

    backlog: list[BacklogRecord] | None
    at: datetime
    ended: dict[tuple[str, str], int] | None = None


MAX_QUEUE_LABELS = 100
"""The most queues a family of the store's figures names: queue names are the callers'
(``with_options(queue=...)``), and each name is a time series of its own; the rest are
added up under :data:`OTHER_QUEUES`."""
OTHER_QUEUES = "(other)"
"""The ``queue`` label of the queues past :data:`MAX_QUEUE_LABELS` (the smallest)."""


@dataclass
class StoreMetrics:
    """What the store holds, read when scraped: :meth:`read` (on the store's event loop),
    then :meth:`families` (anywhere) for what it read.

    ``ended`` adds ``durable_attempts_ended_total`` by queue and outcome, counted from
    this object's first read on (on a store that counts them: PostgreSQL).
    """

    client: DurableClient
    ended: bool = False
    _counted: dict[tuple[str, str], int] = field(default_factory=dict)
    _cursor: int | None = None
    _lock: anyio.Lock | None = None

    async def read(self) -> StoreReading:
        """The backlog (and the attempts ended since the last read), or a reading saying the
        store did not answer within :data:`SCRAPE_TIMEOUT`."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:  # two scrapes at once count each ended attempt once
            try:
                with anyio.fail_after(SCRAPE_TIMEOUT):
                    backlog = await self.client.backlog()
                    ended = None
                    if self.ended and self.client.has_stats:
                        counted = await self.client.count_ended_attempts(self._cursor)
                        if self._cursor is not None:
                            for key, n in counted.counts.items():
                                self._counted[key] = self._counted.get(key, 0) + n
                        self._cursor = counted.cursor
                        ended = dict(self._counted)
            except (FrameworkError, TimeoutError) as exc:
                logger.warning("metrics could not read the store: %s", exc)
                return StoreReading(None, datetime.now(UTC))
        return StoreReading(backlog, datetime.now(UTC), ended)

    @staticmethod
    def families(reading: StoreReading) -> list[Metric]:
        """The metric families of ``reading``."""
        up = GaugeMetricFamily(
            "durable_store_up", "Whether the store answered this scrape's queries (1) or not."
        )
        up.add_metric([], 0 if reading.backlog is None else 1)
        if reading.backlog is None:
            return [up]
        counts = GaugeMetricFamily(
            "durable_backlog_workflows",
            "Unfinished workflows (pending, running, waiting), by queue, workflow and status.",
            labels=["queue", "workflow", "status"],
        )
        oldest = GaugeMetricFamily(
            "durable_backlog_oldest_pending_age_seconds",
            "How long the longest-due pending workflow has been due (0: none is due yet).",
            labels=["queue", "workflow"],
        )
        sizes: dict[str, int] = {}
        for row in reading.backlog:
            sizes[row.queue] = sizes.get(row.queue, 0) + row.count
        named = set(sorted(sizes, key=lambda q: (-sizes[q], q))[:MAX_QUEUE_LABELS])
        counted: dict[tuple[str, str, str], int] = {}
        ages: dict[tuple[str, str], float] = {}
        for row in reading.backlog:
            queue = row.queue if row.queue in named else OTHER_QUEUES
            key = (queue, row.name, row.status.value)
            counted[key] = counted.get(key, 0) + row.count
            if row.status is WorkflowStatus.PENDING:
                age = max(0.0, (reading.at - row.oldest).total_seconds())
                ages[queue, row.name] = max(age, ages.get((queue, row.name), 0.0))
        for labels, n in counted.items():
            counts.add_metric(list(labels), n)
        for pair, age in ages.items():
            oldest.add_metric(list(pair), age)
        families: list[Metric] = [up, counts, oldest]
        if reading.ended is not None:
            ended = CounterMetricFamily(
                "durable_attempts_ended",
                "Attempts that ended, by queue and outcome, counted from the store since this "
                "process began to read it.",
                labels=["queue", "outcome"],
            )
            for (queue, outcome), n in sorted(_fold(reading.ended, named).items()):
                ended.add_metric([queue, outcome], n)
            families.append(ended)
        return families


def _fold(counts: dict[tuple[str, str], int], named: set[str]) -> dict[tuple[str, str], int]:
    """``counts`` by (queue, outcome), a queue not ``named`` (nor among the first
    :data:`MAX_QUEUE_LABELS` of its own) counted under :data:`OTHER_QUEUES`."""
    extra = sorted({q for q, _ in counts} - named)[: max(MAX_QUEUE_LABELS - len(named), 0)]
    keep = named | set(extra)
    folded: dict[tuple[str, str], int] = {}
    for (queue, outcome), n in counts.items():
        key = (queue if queue in keep else OTHER_QUEUES, outcome)
        folded[key] = folded.get(key, 0) + n
    return folded


class _Families:
    """A collector of metric families read beforehand (or at each scrape, by ``read``)."""

    def __init__(self, read: Callable[[], list[Metric]]) -> None:
        self.read = read

    def describe(self) -> Iterable[Metric]:
        return ()  # registering reads nothing

    def collect(self) -> Iterable[Metric]:
        return self.read()


async def store_exposition(metrics: StoreMetrics) -> bytes:
    """The store's metrics now, in Prometheus's text format (:data:`CONTENT_TYPE`)."""
    reading = await metrics.read()
    registry = CollectorRegistry()
    registry.register(_Families(lambda: StoreMetrics.families(reading)))
    return generate_latest(registry)


def instrument(registry: CollectorRegistry | None = None) -> PrometheusObserver:
    """Count what this process's workers do from now on, in ``registry`` (a new one by
    default); calling it again replaces the observer."""
    uninstrument()
    observer = PrometheusObserver(registry)
    plugin_manager().register(observer, name=PLUGIN_NAME)
    return observer


def uninstrument() -> None:
    """Stop what :func:`instrument` started."""
    manager = plugin_manager()
    if manager.get_plugin(PLUGIN_NAME) is not None:
        manager.unregister(name=PLUGIN_NAME)


@asynccontextmanager
async def metrics_endpoint(
    host: str, port: int, *, store: Store | None = None
) -> AsyncIterator[PrometheusObserver]:
    """Serve this process's worker metrics (and, with ``store``, the store's, read on this
    event loop at each scrape) on ``http://host:port/metrics`` while the block runs, with
    prometheus-client's HTTP server in a thread of its own. A port that cannot be had
    raises :class:`ConfigurationError` before anything is served or logged."""
    observer = instrument()
    try:
        async with BlockingPortal() as portal:
            if store is not None:
                metrics = StoreMetrics(DurableClient(store))

                def scrape() -> list[Metric]:
                    try:
                        reading = portal.call(metrics.read)
                    except RuntimeError:  # the loop is going away: the store is not read
                        reading = StoreReading(None, datetime.now(UTC))
                    return StoreMetrics.families(reading)

                observer.registry.register(_Families(scrape))
            try:
                server, _ = start_http_server(port, host, registry=observer.registry)
            except OSError as exc:
                why = "the port is taken" if exc.errno == errno.EADDRINUSE else exc.strerror
                raise ConfigurationError(
                    f"cannot serve metrics on {host}:{port}: {why or exc}"
                ) from None
            try:
                logger.info("metrics on http://%s:%s/metrics", host, server.server_port)
                yield observer
            finally:
                server.shutdown()  # no new scrape waits on the portal once it closes
                server.server_close()
    finally:
        uninstrument()
