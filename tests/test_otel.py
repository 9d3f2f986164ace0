"""OpenTelemetry: one trace from the starter's span through each attempt and step, and metrics.

Real workflows on real SQLite and PostgreSQL, run by the in-process runner and by
a real worker; what OpenTelemetry receives is read from the SDK's in-memory
span exporter and metric reader.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

import durable_core.observers.otel
from durable_core import (
    DurableClient,
    RetryPolicy,
    WorkflowConfig,
    WorkflowContext,
    WorkflowHandle,
    WorkflowStatus,
    recv,
    sleep,
    workflow,
    workflow_step,
)
from durable_core.cli import import_app
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.plugins import plugin_manager, workflow_headers
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from tests.conftest import POSTGRES_URL, fresh_postgres_database

pytestmark = pytest.mark.anyio

TRIES: dict[str, int] = {}
"""Tries so far of ``flaky`` per key: its first try fails."""

FAILS: dict[str, int] = {}
"""How many more times ``stumble`` fails, per key (each failure fails an attempt)."""

APP: list[TracerProvider] = []
"""The tracer provider the application's own spans come from, in a test."""


@workflow_step
async def reserve(key: str) -> str:
    return f"reserved {key}"


@workflow_step(retry=RetryPolicy(max_attempts=3, initial_interval=0.01))
async def flaky(key: str) -> str:
    TRIES[key] = TRIES.get(key, 0) + 1
    if TRIES[key] == 1:
        raise ConnectionError("payment API unreachable")
    return "charged"


@workflow_step
def notify(key: str) -> str:  # a plain def: runs in a worker thread
    with trace.get_tracer("app", tracer_provider=APP[0]).start_as_current_span("send mail"):
        return f"mailed {key}"


@workflow
async def order_flow(key: str) -> str:
    await reserve(key)
    await flaky(key)
    return await notify(key)


@workflow_step
async def stumble(key: str) -> None:
    if FAILS.get(key, 0) > 0:
        FAILS[key] -= 1
        raise ValueError("not yet")


@workflow
async def stumbling(key: str) -> None:
    await stumble(key)


@workflow
async def napping() -> str:
    await sleep(timedelta(hours=1))
    return await reserve("after the nap")


@workflow_step
async def cancel_me() -> None:
    """Cancel the running workflow from inside its step: the body stops at the next write."""
    ctx = WorkflowContext.current()
    assert ctx is not None
    await ctx.store.cancel_workflow(ctx.workflow_id)
    await anyio.sleep(30)  # the cancel stops the step here


@workflow
async def self_cancelling() -> None:
    await cancel_me()


@workflow
async def parent_flow() -> str:
    child = await durable_core.start_workflow(order_flow, "child-" + uuid.uuid4().hex[:8])
    return await child.output()


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer: trace.Tracer

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.finished() if span.name == name]

    def points(self, metric: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for found in scope.metrics
            if found.name == metric
            for point in found.data.data_points
        ]

    def total(self, metric: str, **labels: Any) -> float:
        """The sum of a counter's points, or the count of a histogram's, with ``labels``."""
        selected = [
            p
            for p in self.points(metric)
            if all(p.attributes.get(k) == v for k, v in labels.items())
        ]
        return sum(p.count if isinstance(p, HistogramDataPoint) else p.value for p in selected)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[reader])
    APP[:] = [tracer_provider]
    durable_core.observers.otel.instrument(tracer_provider, meter_provider)
    try:
        yield Telemetry(spans, reader, tracer_provider.get_tracer("test"))
    finally:
        durable_core.observers.otel.uninstrument()
        APP.clear()
        tracer_provider.shutdown()
        meter_provider.shutdown()


@pytest.fixture
async def postgres_store() -> AsyncIterator[Store]:
    """A PostgreSQL database of this module's own, emptied first, for a real worker."""
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    store = PostgresStore(await fresh_postgres_database(POSTGRES_URL, f"{base}_otel_worker"))
    await store.open()
    await store.apply_schema()
    try:
        yield store
    finally:
        await store.close()


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def context_of(span: ReadableSpan) -> SpanContext:
    context: SpanContext | None = span.context  # the SDK leaves ``context`` unannotated
    assert context is not None
    return context


def span_id(span: ReadableSpan) -> int:
    return context_of(span).span_id


def trace_id(span: ReadableSpan) -> int:
    return context_of(span).trace_id


async def test_one_trace_holds_the_request_the_attempt_and_each_step_try(
    sqlite_or_postgres: Store, telemetry: Telemetry
) -> None:
    key = uuid.uuid4().hex
    with telemetry.tracer.start_as_current_span("POST /orders") as request:
        handle = await DurableClient(sqlite_or_postgres).start_workflow(order_flow, key)
    # The runner runs it later and elsewhere, outside the request's span.
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert await WorkflowRunner(sqlite_or_postgres).run_until_complete(handle) is (
        WorkflowStatus.SUCCEEDED
    )

    [starter] = telemetry.named("POST /orders")
    [start] = telemetry.named(f"start {order_flow.name}")
    [attempt] = telemetry.named(f"run {order_flow.name}")
    tries = telemetry.named(f"step {flaky.name}")
    [reserved] = telemetry.named(f"step {reserve.name}")
    [notified] = telemetry.named(f"step {notify.name}")
    [mail] = telemetry.named("send mail")
    assert {trace_id(span) for span in telemetry.finished()} == {
        request.get_span_context().trace_id
    }
    assert parent_of(start) == span_id(starter) and start.kind is SpanKind.PRODUCER
    assert start.attributes is not None
    assert start.attributes["durable.workflow.id"] == handle.id
    assert start.attributes["messaging.operation.type"] == "create"
    assert parent_of(attempt) == span_id(start)
    assert attempt.kind is SpanKind.CONSUMER
    assert attempt.attributes is not None
    assert attempt.attributes["durable.workflow.id"] == handle.id
    assert attempt.attributes["durable.workflow.attempt"] == 1
    assert attempt.attributes["durable.workflow.outcome"] == "succeeded"
    assert attempt.status.status_code is StatusCode.UNSET

    # Every step try is a child of the attempt, in order; the first try of flaky failed.
    assert len(tries) == 2
    steps = sorted([reserved, *tries, notified], key=lambda span: span.start_time or 0)
    assert steps == [reserved, tries[0], tries[1], notified]
    assert {parent_of(step) for step in steps} == {span_id(attempt)}
    first, second = tries
    assert first.attributes is not None and second.attributes is not None
    assert (
        first.attributes["durable.step.attempt"],
        second.attributes["durable.step.attempt"],
    ) == (
        1,
        2,
    )
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "builtins.ConnectionError: payment API unreachable"
    assert first.attributes["error.type"] == "builtins.ConnectionError"
    [exception] = first.events
    assert exception.name == "exception"
    assert exception.attributes is not None
    assert exception.attributes["exception.message"] == "payment API unreachable"
    assert second.status.status_code is StatusCode.UNSET
    assert (first.end_time or 0) <= (second.start_time or 0)

    # The span the (threaded) step body opened is nested under the step's span.
    assert parent_of(mail) == span_id(notified)
    assert trace.get_current_span() is trace.INVALID_SPAN  # the runner's context is restored


async def test_the_worker_continues_the_starters_trace(
    postgres_store: Store, telemetry: Telemetry
) -> None:
    key = uuid.uuid4().hex
    with telemetry.tracer.start_as_current_span("POST /orders") as request:
        handle = await DurableClient(postgres_store).start_workflow(order_flow, key)
    worker = WorkflowWorker(postgres_store, WorkflowConfig(poll_interval_ms=20), worker_id="w-otel")
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        assert await handle.wait_with_timeout(15) is WorkflowStatus.SUCCEEDED
        worker.stop()

    [start] = telemetry.named(f"start {order_flow.name}")
    [attempt] = telemetry.named(f"run {order_flow.name}")
    assert trace_id(attempt) == request.get_span_context().trace_id
    assert parent_of(start) == request.get_span_context().span_id
    assert parent_of(attempt) == span_id(start)
    assert attempt.attributes is not None
    assert attempt.attributes["durable.worker.id"] == "w-otel"
    steps = [span for span in telemetry.finished() if span.name.startswith("step ")]
    assert len(steps) == 4
    assert {parent_of(step) for step in steps} == {span_id(attempt)}


async def test_a_retried_attempt_and_a_resumed_wait_stay_in_the_trace(
    sqlite_store: Store, telemetry: Telemetry
) -> None:
    key = uuid.uuid4().hex
    FAILS[key] = 1
    client, runner = DurableClient(sqlite_store, max_attempts=3), WorkflowRunner(sqlite_store)
    with telemetry.tracer.start_as_current_span("POST /retry") as request:
        retried = await client.start_workflow(stumbling, key)
        napper = await client.start_workflow(napping)
    assert await runner.run_until_complete(retried) is WorkflowStatus.SUCCEEDED
    assert await runner.run_until_complete(napper) is WorkflowStatus.SUCCEEDED

    first, second = telemetry.named(f"run {stumbling.name}")
    assert [s.attributes and s.attributes["durable.workflow.outcome"] for s in (first, second)] == [
        "retry",
        "succeeded",
    ]
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes is not None and first.attributes["error.type"] == "builtins.ValueError"
    asleep, awake = telemetry.named(f"run {napping.name}")
    assert asleep.attributes is not None
    assert asleep.attributes["durable.workflow.outcome"] == "waiting"
    assert asleep.attributes["durable.workflow.waiting_for"] == "sleep"
    trace_of_request = request.get_span_context().trace_id
    [retried_start] = telemetry.named(f"start {stumbling.name}")
    [napper_start] = telemetry.named(f"start {napping.name}")
    for start in (retried_start, napper_start):
        assert parent_of(start) == request.get_span_context().span_id
    for attempt, start in (
        (first, retried_start),
        (second, retried_start),
        (asleep, napper_start),
        (awake, napper_start),
    ):
        assert trace_id(attempt) == trace_of_request
        assert parent_of(attempt) == span_id(start)


async def test_a_child_workflow_joins_its_parents_trace(
    sqlite_store: Store, telemetry: Telemetry
) -> None:
    with telemetry.tracer.start_as_current_span("POST /parent"):
        handle = await DurableClient(sqlite_store).start_workflow(parent_flow)
    runner = WorkflowRunner(sqlite_store)
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED

    parent_attempts = telemetry.named(f"run {parent_flow.name}")
    [child] = telemetry.named(f"run {order_flow.name}")
    [child_start] = telemetry.named(f"start {order_flow.name}")
    assert {trace_id(span) for span in telemetry.finished()} == {trace_id(child)}
    assert parent_of(child) == span_id(child_start)
    assert parent_of(child_start) == span_id(parent_attempts[0])  # started by its first attempt


@workflow
async def awaiting_payment(order: str) -> str:
    paid = await recv("paid")
    return await reserve(f"{order} paid {paid}")


async def test_a_workflow_started_outside_any_trace_has_one_trace_across_its_attempts(
    sqlite_store: Store, telemetry: Telemetry
) -> None:
    key = uuid.uuid4().hex
    FAILS[key] = 1
    assert trace.get_current_span() is trace.INVALID_SPAN
    client, runner = DurableClient(sqlite_store, max_attempts=3), WorkflowRunner(sqlite_store)
    retried = await client.start_workflow(stumbling, key)
    napper = await client.start_workflow(napping)
    assert await runner.run_until_complete(retried) is WorkflowStatus.SUCCEEDED
    assert await runner.run_until_complete(napper) is WorkflowStatus.SUCCEEDED

    for flow, attempts in ((stumbling, 2), (napping, 2)):
        [start] = telemetry.named(f"start {flow.name}")
        runs = telemetry.named(f"run {flow.name}")
        assert start.parent is None and start.kind is SpanKind.PRODUCER, "a trace of its own"
        assert len(runs) == attempts
        assert {parent_of(run) for run in runs} == {span_id(start)}
        assert {trace_id(run) for run in runs} == {trace_id(start)}
    starts = [telemetry.named(f"start {flow.name}")[0] for flow in (stumbling, napping)]
    assert trace_id(starts[0]) != trace_id(starts[1]), "each workflow is a trace"


async def test_a_send_is_linked_to_the_workflow_it_wakes(
    sqlite_store: Store, telemetry: Telemetry
) -> None:
    client, runner = DurableClient(sqlite_store), WorkflowRunner(sqlite_store)
    handle = await client.start_workflow(awaiting_payment, "o-7")  # outside any trace
    assert await runner.run_once(handle) is WorkflowStatus.WAITING
    with telemetry.tracer.start_as_current_span("POST /webhooks/payment") as webhook:
        await client.send(handle.id, "42 EUR", topic="paid")
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED

    [start] = telemetry.named(f"start {awaiting_payment.name}")
    asleep, woken = telemetry.named(f"run {awaiting_payment.name}")
    [sent] = telemetry.named("send paid")
    assert sent.kind is SpanKind.PRODUCER
    assert parent_of(sent) == webhook.get_span_context().span_id, "in the sender's trace"
    [link] = sent.links
    assert (link.context.trace_id, link.context.span_id) == (trace_id(start), span_id(start))
    assert link.attributes is not None and link.attributes["durable.workflow.id"] == handle.id
    assert parent_of(woken) == parent_of(asleep) == span_id(start), "the run it woke"
    assert sent.attributes is not None
    assert sent.attributes["messaging.destination.name"] == "paid"


async def test_metrics_count_starts_settles_retries_and_time_steps_and_queue_wait(
    sqlite_or_postgres: Store, telemetry: Telemetry
) -> None:
    ok, bad = uuid.uuid4().hex, uuid.uuid4().hex
    FAILS[bad] = 5
    client, runner = (
        DurableClient(sqlite_or_postgres, max_attempts=2),
        WorkflowRunner(sqlite_or_postgres),
    )
    handles: list[WorkflowHandle[Any]] = [
        await client.start_workflow(order_flow, ok),
        await client.start_workflow(stumbling, bad),
    ]
    await anyio.sleep(0.05)  # both wait in the queue at least this long
    for handle in handles:
        await runner.run_until_complete(handle)

    order, stumbled = order_flow.name, stumbling.name
    name = "durable.workflow.name"
    assert telemetry.total("durable.workflow.starts", **{name: order}) == 1
    assert telemetry.total("durable.workflow.starts", **{name: stumbled}) == 1
    outcome = "durable.workflow.outcome"
    assert telemetry.total("durable.workflow.settles", **{name: order, outcome: "succeeded"}) == 1
    assert telemetry.total("durable.workflow.settles", **{name: stumbled, outcome: "failed"}) == 1
    assert telemetry.total("durable.workflow.retries", **{name: stumbled}) == 1  # 2 attempts
    assert telemetry.total("durable.step.retries", **{"durable.step.name": flaky.name}) == 1
    assert telemetry.total("durable.step.duration", **{"durable.step.name": flaky.name}) == 2
    failed_tries = {"durable.step.name": stumble.name, "error.type": "builtins.ValueError"}
    assert telemetry.total("durable.step.duration", **failed_tries) == 2
    assert telemetry.total("durable.workflow.attempt.duration", **{name: stumbled}) == 2
    [waited] = [
        p for p in telemetry.points("durable.workflow.queue_wait") if p.attributes[name] == order
    ]
    assert waited.count == 1
    assert 0.05 <= waited.sum < 10


async def test_a_cancelled_attempt_ends_its_running_step_span(
    sqlite_store: Store, telemetry: Telemetry
) -> None:
    handle = await DurableClient(sqlite_store).start_workflow(self_cancelling)
    runner = WorkflowRunner(sqlite_store, WorkflowConfig(lock_timeout_secs=2))
    with anyio.fail_after(120):  # the lease renewal, every second, finds it cancelled
        status = await runner.run_until_complete(handle)
    assert status is WorkflowStatus.CANCELLED

    [attempt] = telemetry.named(f"run {self_cancelling.name}")
    [step] = telemetry.named(f"step {cancel_me.name}")
    assert attempt.attributes is not None
    assert attempt.attributes["durable.workflow.outcome"] == "cancelled"
    assert parent_of(step) == span_id(attempt)
    assert step.status.status_code is StatusCode.ERROR
    assert step.status.description == "the attempt ended (cancelled)"
    outcome = {
        "durable.workflow.name": self_cancelling.name,
        "durable.workflow.outcome": "cancelled",
    }
    assert telemetry.total("durable.workflow.settles", **outcome) == 1
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_instrument_replaces_itself_and_uninstrument_stops_it(sqlite_store: Store) -> None:
    first = durable_core.observers.otel.instrument(TracerProvider())
    second = durable_core.observers.otel.instrument(TracerProvider())
    try:
        assert plugin_manager().get_plugin(durable_core.observers.otel.PLUGIN_NAME) is second
        assert not plugin_manager().is_registered(first)
        with second.tracer.start_as_current_span("caller") as caller:
            headers = workflow_headers("some-id", "some.workflow")
        context = caller.get_span_context()
        flags = f"{context.trace_flags:02x}"
        version, trace_hex, span_hex, flags_hex = headers["traceparent"].split("-")
        assert (version, trace_hex, flags_hex) == ("00", f"{context.trace_id:032x}", flags)
        assert span_hex != f"{context.span_id:016x}", "the start's own span, the caller's child"
        assert set(headers) == {"traceparent"}
    finally:
        durable_core.observers.otel.uninstrument()
    assert plugin_manager().get_plugin(durable_core.observers.otel.PLUGIN_NAME) is None
    assert workflow_headers("some-id", "some.workflow") == {}


def test_instrument_is_a_worker_bootstrap() -> None:
    bootstrap = import_app([], "durable_core.observers.otel:instrument")
    assert bootstrap is not None
    try:
        # as `durable worker --bootstrap durable_core.observers.otel:instrument`
        observer = bootstrap()
        assert plugin_manager().get_plugin(durable_core.observers.otel.PLUGIN_NAME) is observer
    finally:
        durable_core.observers.otel.uninstrument()
