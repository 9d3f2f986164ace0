"""The third security review's attacks that need no browser (issue 37), each on the real
command, a real database or a real log handler; the dashboard's are in
``tests/test_dashboard_attacks.py``. Each test names the defect it attacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    Registry,
    WorkflowConfig,
    WorkflowStatus,
    recv,
    send,
    set_attributes,
    workflow,
    workflow_step,
)
from durable_core.codec import encode_arguments
from durable_core.redaction import redact
from durable_core.seams.records import NewWorkflow
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.conftest import POSTGRES_URL, Backend, migrated_postgres_database
from tests.raw_sql import fetch

ROOT = Path(__file__).resolve().parents[1]
DURABLE = [sys.executable, "-m", "durable_core"]
FAST = WorkflowConfig(retry_backoff_secs=0)


# -- 11: a body forging the library's own messages ---------------------------------------------


@workflow
async def waits_for_anything() -> Any:
    return await recv("orders", timeout=3600)


@workflow(max_attempts=3)
async def forges_a_cancel(target: str) -> None:
    await send(target, "stop", topic="durable.cancel")


async def test_11_a_body_cannot_send_on_a_reserved_topic(any_backend: Backend) -> None:
    """``send(..., topic="durable.cancel")`` from a body is refused as a caller's is, before
    anything is written, and the body fails at once (bad input is not retried); the store's
    own ``send`` refuses it too."""
    store = any_backend.store
    client = DurableClient(store)
    target = await client.start_workflow(waits_for_anything)
    forger = await client.start_workflow(forges_a_cancel, target.id)
    runner = WorkflowRunner(store, FAST)
    assert await runner.run_until_complete(forger) is WorkflowStatus.FAILED
    record = await client.get(forger.id)
    error = await forger.error()
    assert error is not None and error["type"] == "durable_core.errors.ConfigurationError"
    assert "topic 'durable.cancel' is reserved" in error["message"]
    assert record.attempts == 1
    with pytest.raises(ConfigurationError, match="is reserved"):
        await store.send(target.id, "durable.cancel", '"stop"', "forged-1")
    sent = "SELECT topic FROM workflow_messages WHERE workflow_id = :id"
    assert await fetch(any_backend.url, sent, {"id": target.id}) == []


# -- 12: a NUL in an attribute value -----------------------------------------------------------


@workflow(max_attempts=3)
async def tags_with_a_nul() -> str:
    await set_attributes(customer="acme\x00corp")
    return "tagged"


async def test_12_a_nul_in_an_attribute_is_bad_input_on_every_backend(
    any_backend: Backend,
) -> None:
    """From a caller: a :class:`ConfigurationError` naming the attribute, not a driver's
    error; from a body: the workflow fails on its first attempt (never retried as if the
    database were down); nothing is written."""
    store = any_backend.store
    client = DurableClient(store)
    handle = await client.start_workflow(tags_with_a_nul)
    with pytest.raises(ConfigurationError, match="attribute 'customer' holds a NUL"):
        await client.set_attributes(handle.id, customer="a\x00b")
    with pytest.raises(ConfigurationError, match="NUL"):
        await client.list_workflows(attributes={"customer": "a\x00b"})
    with pytest.raises(ConfigurationError, match="lone surrogate"):
        await client.set_attributes(handle.id, customer="a\ud800b")
    assert await WorkflowRunner(store, FAST).run_until_complete(handle) is (WorkflowStatus.FAILED)
    error = await handle.error()
    assert error is not None and error["type"] == "durable_core.errors.ConfigurationError"
    assert (await client.get(handle.id)).attempts == 1
    rows = "SELECT name FROM workflow_attributes WHERE workflow_id = :id"
    assert await fetch(any_backend.url, rows, {"id": handle.id}) == []


@workflow(max_attempts=3)
async def sends_with_a_nul_key(target: str) -> None:
    await send(target, "hello", topic="orders", idempotency_key="key\x00")


async def test_12_a_value_the_database_refuses_is_not_retried(
    postgres_url: str,
) -> None:
    """A value only the database refuses (PostgreSQL's text holds no NUL: here an
    idempotency key) is a :class:`ConfigurationError` from the SQL layer, not a
    ``StoreError`` a body retries."""
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    store = PostgresStore(await migrated_postgres_database(POSTGRES_URL, f"{base}_refused"))
    async with store:
        client = DurableClient(store)
        target = await client.start_workflow(waits_for_anything)
        with pytest.raises(ConfigurationError, match="the database refused a value"):
            await store.send(target.id, "orders", '"x"', "key\x00")
        sender = await client.start_workflow(sends_with_a_nul_key, target.id)
        assert await WorkflowRunner(store, FAST).run_until_complete(sender) is (
            WorkflowStatus.FAILED
        )
        error = await sender.error()
        assert error is not None and error["type"] == "durable_core.errors.ValueRefusedError"
        assert (await client.get(sender.id)).attempts == 1


# -- 3: JSON logs leaking a password through a traceback ---------------------------------------

_LOGS_AN_EXCEPTION = """
import logging
from durable_core.cli.common import configure_logging
from durable_core.redaction import get_logger

configure_logging("INFO", {fmt!r})
for logger in (get_logger("durable_core.worker"), logging.getLogger("a.library")):
    try:
        raise OSError("cannot reach postgresql://app:hunter2@db:5432/orders?sslpassword=s3cr3t")
    except OSError:
        logger.exception("connect failed for postgresql://app:hunter2@db/orders")
"""


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_3_no_log_format_shows_a_password_in_a_traceback(fmt: str) -> None:
    """``--log-format json`` writes the traceback's text redacted, as the text format does,
    for durable's loggers and the libraries' alike."""
    ran = subprocess.run(
        [sys.executable, "-c", _LOGS_AN_EXCEPTION.format(fmt=fmt)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert ran.returncode == 0, ran.stderr
    assert "hunter2" not in ran.stderr and "s3cr3t" not in ran.stderr, ran.stderr
    assert ran.stderr.count("postgresql://app:***@db:5432/orders?sslpassword=***") == 2
    if fmt == "json":
        records = [json.loads(line) for line in ran.stderr.splitlines()]
        assert [r["logger"] for r in records] == ["durable_core.worker", "a.library"]
        for record in records:
            assert "Traceback" in record["exc_info"] and "OSError" in record["exc_info"]
            assert record["message"] == "connect failed for postgresql://app:***@db/orders"


# -- 4: a ?password= value leaking past a space or a quote -------------------------------------

SEPARATORS = [" ", ";", ",", "#", "'", ")", '"', "&x=", "%"]


@pytest.mark.parametrize("separator", SEPARATORS)
async def test_4_no_part_of_a_query_password_is_shown(separator: str, postgres_url: str) -> None:
    """The URL-decoded ``?password=`` value is masked whole: in the store's description,
    in ``redact`` of the URL as written, and in the output of a real command."""
    secret = f"Tr0ub4dor{separator}Horse"
    url = f"{postgres_url}?password={quote_plus(secret)}&application_name=durable"
    assert "Horse" not in PostgresStore(url).description
    written = quote_plus(secret, safe=";,#')\"%")  # as written: "&", "=" and " " encoded
    assert "Horse" not in redact(f"open {postgres_url}?password={written}&sslmode=disable")
    migrated = subprocess.run(
        [sys.executable, "-m", "durable_core", "migrate", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "Horse" not in migrated.stdout + migrated.stderr
    assert "?application_name=durable&password=***" in migrated.stdout


# -- 5: replay-check printing stored control sequences -----------------------------------------

CHECKED = Registry()


@workflow_step(name="orders.reserve")
async def reserve_v1(item: str) -> str:
    return f"reserved {item}"


@workflow_step(name="orders.charge")
async def charge_v1(item: str) -> str:
    return f"charged {item}"


@workflow(name="orders.place", registry=CHECKED)
async def place_v1(item: str) -> str:
    await reserve_v1(item)
    await charge_v1(item)
    return str(await recv("shipped"))


async def test_5_replay_check_prints_no_control_sequence(tmp_path: Path) -> None:
    """A workflow id written before ids were checked (by an older release, or straight into
    the table) holds a window title, a clear-screen and a right-to-left override: the
    divergence line shows the id without them."""
    url = f"sqlite:///{tmp_path / 'flight.db'}"
    evil = "order-1\x1b]0;pwned\x07\x1b[2J\x1b[H\u202egnp.exe"
    async with SQLiteStore(url) as store:
        await store.apply_schema()
        given = encode_arguments(("lamp",), {}, what="input")
        row = NewWorkflow(id=evil, name=place_v1.name, input=given, max_attempts=3)
        await store.enqueue([row])
        runner = WorkflowRunner(store, registry=CHECKED)
        assert await runner.run_once(evil) is WorkflowStatus.WAITING
    checked = subprocess.run(
        [*DURABLE, "replay-check", "--app", "tests.replay_apps.orders_new", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert checked.returncode == 1, checked.stderr
    [line] = checked.stdout.splitlines()
    assert line.startswith("order-1gnp.exe orders.place at index 1: "), line
    for shown in (checked.stdout, checked.stderr):
        assert not any(c in shown for c in "\x1b\x07\u202e"), shown


# -- 13: the informational findings that need no browser ---------------------------------------


def test_13_worker_metrics_listen_on_this_machine_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--metrics-port`` alone serves metrics (unauthenticated) on loopback, not on every
    interface; ``--metrics-host`` still chooses."""
    from durable_core.cli import build_parser
    from durable_core.cli.running import _metrics_address

    monkeypatch.delenv("DURABLE_METRICS_HOST", raising=False)
    parser = build_parser()
    assert _metrics_address(parser.parse_args(["worker", "--metrics-port", "0"])) == (
        "127.0.0.1",
        0,
    )
    chosen = parser.parse_args(["worker", "--metrics-port", "9464", "--metrics-host", "0.0.0.0"])
    assert _metrics_address(chosen) == ("0.0.0.0", 9464)


def test_13_caller_chosen_queues_do_not_multiply_metric_labels() -> None:
    """Queue names are the callers' to choose: past ``MAX_QUEUE_LABELS`` of them, the store's
    figures add the smallest up under one label, and every workflow is still counted."""
    from datetime import UTC, datetime

    from durable_core.observers.metrics import (
        MAX_QUEUE_LABELS,
        OTHER_QUEUES,
        StoreMetrics,
        StoreReading,
    )
    from durable_core.seams.records import BacklogRecord

    now = datetime.now(UTC)
    backlog = [
        BacklogRecord(f"tenant-{n}", "app.flow", WorkflowStatus.PENDING, 1 + n % 7, now)
        for n in range(1000)
    ]
    ended = {(f"tenant-{n}", "succeeded"): 2 for n in range(1000)}
    families = StoreMetrics.families(StoreReading(backlog, now, ended))
    by_name = {family.name: family for family in families}
    counts = by_name["durable_backlog_workflows"].samples
    queues = {sample.labels["queue"] for sample in counts}
    assert len(queues) == MAX_QUEUE_LABELS + 1 and OTHER_QUEUES in queues
    assert sum(sample.value for sample in counts) == sum(row.count for row in backlog)
    ended_samples = [
        s for s in by_name["durable_attempts_ended"].samples if s.name.endswith("_total")
    ]
    assert len({s.labels["queue"] for s in ended_samples}) == MAX_QUEUE_LABELS + 1
    assert sum(s.value for s in ended_samples) == 2000
