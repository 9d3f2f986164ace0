"""OpenTelemetry for durable workflows (the ``[otel]`` extra): spans, metrics, trace context.

:func:`instrument` registers an :class:`OpenTelemetryObserver`, which

- opens a span for each start (``start <workflow name>``, kind ``PRODUCER``) in the
  starter's trace, or a new one, and stores its context (W3C ``traceparent``, through
  the global propagator) in the workflow's headers; each attempt's span is its child,
  so one trace holds a web request, the workflow it started and every attempt of it
  (a workflow started outside any trace too);
- opens a span for each ``send`` (``send <topic>``, kind ``PRODUCER``) in the sender's
  trace, linked to the start of the workflow it wakes;
- emits a span per attempt (``run <workflow name>``, kind ``CONSUMER``) and per step
  try (``step <step name>``), current while the body or the step runs, so spans your
  code opens there nest under them (and children it starts join the trace);
- records counters and histograms: starts, settles, retries, step durations,
  attempt durations and queue wait.

Only this module imports ``opentelemetry``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import Token
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import ConfigurationError
from ..seams.events import AttemptEvent
from ..seams.hookspecs import hookimpl
from ..seams.plugins import plugin_manager

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.util.types import AttributeValue
except ModuleNotFoundError as exc:
    raise ConfigurationError(
        f"durable_core.observers.otel needs OpenTelemetry, which is not installed ({exc.name}): "
        "pip install 'durable-core[otel]'"
    ) from None

SCOPE = "durable_core"
"""The instrumentation scope of the tracer and the meter."""

PLUGIN_NAME = "durable_core.otel"
"""The name :func:`instrument` registers its observer under."""

WORKFLOW_NAME = "durable.workflow.name"
WORKFLOW_ID = "durable.workflow.id"
ATTEMPT = "durable.workflow.attempt"
MAX_ATTEMPTS = "durable.workflow.max_attempts"
OUTCOME = "durable.workflow.outcome"
WAITING_FOR = "durable.workflow.waiting_for"
WORKER_ID = "durable.worker.id"
STEP_NAME = "durable.step.name"
STEP_INDEX = "durable.step.index"
STEP_ATTEMPT = "durable.step.attempt"
ERROR_TYPE = "error.type"

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass
class _Open:
    """A span this observer started and has not ended, and the context it made current."""

    span: trace.Span
    token: Token[otel_context.Context]
    name: str
    started: float = field(default_factory=time.perf_counter)

    def close(self) -> float:
        """End the span, leave its context if it is still current; the seconds it lasted."""
        self.span.end()
        if trace.get_current_span() is self.span:
            otel_context.detach(self.token)
        return time.perf_counter() - self.started


@dataclass
class _Attempt(_Open):
    attempts: int = 0
    steps: dict[int, _Open] = field(default_factory=dict)
    """The steps running now, by index."""


class OpenTelemetryObserver:
    """An observer that reports workflows to OpenTelemetry (see the module docs).

    ``tracer_provider`` and ``meter_provider`` default to the global ones.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.starts = meter.create_counter(
            "durable.workflow.starts", unit="{workflow}", description="Workflows started."
        )
        self.settles = meter.create_counter(
            "durable.workflow.settles",
            unit="{workflow}",
            description="Workflows that ended: succeeded, failed or cancelled.",
        )
        self.retries = meter.create_counter(
            "durable.workflow.retries",
            unit="{attempt}",
            description="Failed attempts another attempt follows.",
        )
        self.step_retries = meter.create_counter(
            "durable.step.retries",
            unit="{try}",
            description="Tries of a step after its first (under a step retry policy).",
        )
        self.step_duration = meter.create_histogram(
            "durable.step.duration",
            unit="s",
            description="How long a step's body ran, per try.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.attempt_duration = meter.create_histogram(
            "durable.workflow.attempt.duration",
            unit="s",
            description="How long an attempt ran, from its claim to its end.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.queue_wait = meter.create_histogram(
            "durable.workflow.queue_wait",
            unit="s",
            description="How long a workflow was due before a worker claimed it.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._attempts: dict[str, _Attempt] = {}

    # -- the starter's side -----------------------------------------------------------------

    @hookimpl
    def durable_workflow_headers(self, workflow_id: str, workflow_name: str) -> dict[str, str]:
        """A producer span for the start, in the starter's trace (a new trace when there is
        none), whose context the workflow keeps: each of its attempts is its child."""
        span = self.tracer.start_span(
            f"start {workflow_name}",
            kind=SpanKind.PRODUCER,
            attributes={
                WORKFLOW_NAME: workflow_name,
                WORKFLOW_ID: workflow_id,
                "messaging.system": SCOPE,
                "messaging.operation.type": "create",
                "messaging.message.id": workflow_id,
            },
        )
        span.end()
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    @hookimpl
    def durable_message_sent(
        self, workflow_id: str, topic: str, headers: Mapping[str, str]
    ) -> None:
        """A producer span for the send, in the sender's trace, linked to the start of the
        workflow it wakes (the parent of that workflow's attempts)."""
        started = propagate.extract(dict(headers), context=otel_context.Context())
        target = trace.get_current_span(started).get_span_context()
        span = self.tracer.start_span(
            f"send {topic}" if topic else "send",
            kind=SpanKind.PRODUCER,
            links=[trace.Link(target, {WORKFLOW_ID: workflow_id})] if target.is_valid else (),
            attributes={
                WORKFLOW_ID: workflow_id,
                "messaging.system": SCOPE,
                "messaging.operation.type": "send",
                "messaging.destination.name": topic,
            },
        )
        span.end()

    @hookimpl
    def durable_workflow_enqueued(self, workflow_name: str) -> None:
        self.starts.add(1, {WORKFLOW_NAME: workflow_name})

    # -- attempts ---------------------------------------------------------------------------

    @hookimpl
    def durable_workflow_claimed(
        self, attempt: AttemptEvent, queue_wait: float | None, headers: Mapping[str, str]
    ) -> None:
        workflow_id, workflow_name = attempt.workflow_id, attempt.workflow_name
        stale = self._attempts.pop(workflow_id, None)
        if stale is not None:  # an attempt here that never settled (its store went away)
            self._end_attempt(stale, "abandoned")
        parent = propagate.extract(dict(headers), context=otel_context.Context())
        span = self.tracer.start_span(
            f"run {workflow_name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                WORKFLOW_NAME: workflow_name,
                WORKFLOW_ID: workflow_id,
                ATTEMPT: attempt.attempts,
                MAX_ATTEMPTS: attempt.max_attempts,
                WORKER_ID: attempt.worker_id,
                "messaging.system": SCOPE,
                "messaging.operation.type": "process",
                "messaging.message.id": workflow_id,
            },
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        self._attempts[workflow_id] = _Attempt(
            span, token, workflow_name, attempts=attempt.attempts
        )
        if queue_wait is not None:
            self.queue_wait.record(queue_wait, {WORKFLOW_NAME: workflow_name})

    def _attempt(self, event: AttemptEvent) -> _Attempt | None:
        attempt = self._attempts.get(event.workflow_id)
        return attempt if attempt is not None and attempt.attempts == event.attempts else None

    def _end_attempt(self, attempt: _Attempt, outcome: str) -> None:
        for step in reversed(attempt.steps.values()):  # steps the end interrupted
            step.span.set_status(Status(StatusCode.ERROR, f"the attempt ended ({outcome})"))
            step.close()
        attempt.span.set_attribute(OUTCOME, outcome)
        seconds = attempt.close()
        self.attempt_duration.record(seconds, {WORKFLOW_NAME: attempt.name, OUTCOME: outcome})

    def _settle(
        self,
        event: AttemptEvent,
        outcome: str,
        error: Mapping[str, Any] | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> _Attempt | None:
        attempt = self._attempt(event)
        if attempt is None:
            return None
        del self._attempts[event.workflow_id]
        attempt.span.set_attributes(attributes or {})
        if error is not None:
            _record_error(attempt.span, error)
        self._end_attempt(attempt, outcome)
        return attempt

    @hookimpl
    def durable_workflow_succeeded(self, attempt: AttemptEvent) -> None:
        ended = self._settle(attempt, "succeeded")
        if ended is not None:
            self.settles.add(1, {WORKFLOW_NAME: ended.name, OUTCOME: "succeeded"})

    @hookimpl
    def durable_workflow_failed(self, attempt: AttemptEvent, error: Mapping[str, Any]) -> None:
        ended = self._settle(attempt, "failed", error)
        if ended is not None:
            labels = {WORKFLOW_NAME: ended.name, OUTCOME: "failed", ERROR_TYPE: error["type"]}
            self.settles.add(1, labels)

    @hookimpl
    def durable_retry_scheduled(
        self, attempt: AttemptEvent, error: Mapping[str, Any], delay_seconds: float
    ) -> None:
        ended = self._settle(attempt, "retry", error, {"durable.retry.delay": delay_seconds})
        if ended is not None:
            self.retries.add(1, {WORKFLOW_NAME: ended.name, ERROR_TYPE: error["type"]})

    @hookimpl
    def durable_workflow_waiting(
        self, attempt: AttemptEvent, waiting_for: str, wake_at: datetime | None
    ) -> None:
        extra: dict[str, AttributeValue] = {WAITING_FOR: waiting_for}
        if wake_at is not None:
            extra["durable.workflow.wake_at"] = wake_at.isoformat()
        self._settle(attempt, "waiting", attributes=extra)

    @hookimpl
    def durable_workflow_cancelled(self, attempt: AttemptEvent) -> None:
        ended = self._settle(attempt, "cancelled")
        if ended is not None:
            self.settles.add(1, {WORKFLOW_NAME: ended.name, OUTCOME: "cancelled"})

    @hookimpl
    def durable_lease_lost(self, attempt: AttemptEvent) -> None:
        held = self._attempt(attempt)
        if held is not None:
            held.span.set_status(Status(StatusCode.ERROR, "lease lost"))
        self._settle(attempt, "lease_lost")

    # -- steps ------------------------------------------------------------------------------

    @hookimpl
    def durable_step_started(
        self, attempt: AttemptEvent, step_index: int, step_name: str, step_attempt: int
    ) -> None:
        held = self._attempt(attempt)
        if held is None:
            return
        parent = trace.set_span_in_context(held.span)
        span = self.tracer.start_span(
            f"step {step_name}",
            context=parent,
            attributes={
                WORKFLOW_ID: attempt.workflow_id,
                STEP_NAME: step_name,
                STEP_INDEX: step_index,
                STEP_ATTEMPT: step_attempt,
            },
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        held.steps[step_index] = _Open(span, token, step_name)
        if step_attempt > 1:
            self.step_retries.add(1, {WORKFLOW_NAME: held.name, STEP_NAME: step_name})

    def _end_step(self, event: AttemptEvent, step_index: int, error: BaseException | None) -> None:
        attempt = self._attempt(event)
        step = None if attempt is None else attempt.steps.pop(step_index, None)
        if attempt is None or step is None:
            return
        labels: dict[str, AttributeValue] = {WORKFLOW_NAME: attempt.name, STEP_NAME: step.name}
        if error is not None:
            error_type = _qualified(type(error))
            labels[ERROR_TYPE] = error_type
            step.span.record_exception(error)
            step.span.set_attribute(ERROR_TYPE, error_type)
            step.span.set_status(Status(StatusCode.ERROR, f"{error_type}: {error}"))
        self.step_duration.record(step.close(), labels)

    @hookimpl
    def durable_step_succeeded(self, attempt: AttemptEvent, step_index: int, cached: bool) -> None:
        if not cached:  # a replayed step ran in an earlier attempt, under that one's span
            self._end_step(attempt, step_index, None)

    @hookimpl
    def durable_step_failed(
        self, attempt: AttemptEvent, step_index: int, error: BaseException
    ) -> None:
        self._end_step(attempt, step_index, error)


def _qualified(cls: type) -> str:
    """The type's name as error records have it (``builtins.ValueError``)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _record_error(span: trace.Span, error: Mapping[str, Any]) -> None:
    """Mark ``span`` failed with an error record (``type``, ``message``, ``traceback``)."""
    error_type, message = str(error.get("type")), str(error.get("message", ""))
    event: dict[str, AttributeValue] = {"exception.type": error_type, "exception.message": message}
    if error.get("traceback"):
        event["exception.stacktrace"] = str(error["traceback"])
    span.add_event("exception", event)
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}"))


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> OpenTelemetryObserver:
    """Report workflows to OpenTelemetry from now on, in this process (see the module
    docs); call it where you set up OpenTelemetry, in the starter and in the worker
    (its ``--bootstrap`` function). Calling it again replaces the observer."""
    uninstrument()
    observer = OpenTelemetryObserver(tracer_provider, meter_provider)
    plugin_manager().register(observer, name=PLUGIN_NAME)
    return observer


def uninstrument() -> None:
    """Stop what :func:`instrument` started."""
    manager = plugin_manager()
    if manager.get_plugin(PLUGIN_NAME) is not None:
        manager.unregister(name=PLUGIN_NAME)
