"""Erasure (issue 37): ``durable erase`` and ``DurableClient.erase`` replace a settled
workflow's payloads with tombstones on every backend, keep its row, status, timings and
history, leave nothing of the payload in any table, and make a replay over an erased value
a clear error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from durable_core import (
    DurableClient,
    ErasedValueError,
    InvalidStateError,
    WorkflowNotFoundError,
    WorkflowStatus,
)
from durable_core.dashboard import create_app
from durable_core.testing import WorkflowRunner
from tests.conftest import POSTGRES_URL, Backend
from tests.encryption_support import encrypting, found_in
from tests.private_flows import enrol, person, run_enrolment, secrets_of
from tests.raw_sql import every_row, fetch

ROOT = Path(__file__).resolve().parents[1]
KEY = os.urandom(32)

KEPT = {
    "workflows": "SELECT id, name, status, attempts, max_attempts, created_at, completed_at,"
    " started_at, queue, parent_id FROM workflows WHERE id = :id",
    "workflow_steps": "SELECT step_index, step_name, status, attempts, started_at, completed_at"
    " FROM workflow_steps WHERE workflow_id = :id ORDER BY step_index",
    "workflow_attempts": "SELECT attempt, worker, started_at, ended_at, outcome"
    " FROM workflow_attempts WHERE workflow_id = :id ORDER BY seq",
    "workflow_step_tries": "SELECT step_index, try_number, started_at, ended_at"
    " FROM workflow_step_tries WHERE workflow_id = :id ORDER BY seq",
    "workflow_messages": "SELECT topic, sent_at, consumed_at FROM workflow_messages"
    " WHERE workflow_id = :id ORDER BY seq",
}
"""What an erasure keeps, for audit: each table's rows of the workflow but their payloads."""


async def _kept(url: str, workflow_id: str) -> dict[str, list[tuple[Any, ...]]]:
    return {table: await fetch(url, sql, {"id": workflow_id}) for table, sql in KEPT.items()}


@pytest.mark.parametrize("encrypted", [False, True], ids=["json", "encrypted"])
async def test_nothing_of_an_erased_payload_remains_in_any_table(
    any_backend: Backend, encrypted: bool
) -> None:
    """Two enrolments are erased (one succeeded, one failed with an error naming the
    person), with the children they started; a third is not. Afterwards no row of any
    table holds the erased ones' data, in clear or encrypted (their texts are
    tombstones), the third's is all there, and the erased ones' rows, statuses, timings,
    steps, attempts and errors' types are as they were."""
    store, url = any_backend.store, any_backend.url
    grace, ada, kept = person("Grace Hopper"), person("Ada Lovelace"), person("Alan Turing")
    client = DurableClient(store)
    with encrypting({"A": KEY}) if encrypted else _plain():
        done, _ = await run_enrolment(store, grace, "approved")
        refused, status = await run_enrolment(store, ada, "refuse")
        other, _ = await run_enrolment(store, kept, "approved")
        assert status is WorkflowStatus.FAILED
        children = [r.id for r in await client.list_workflows(parent_id=done)]
        before = {w: await _kept(url, w) for w in (done, refused)}
        erased_rows = await every_row(url)
        assert found_in(erased_rows, [grace.name, ada.name]) or encrypted
        for workflow_id in (done, refused):
            assert await client.erase(workflow_id) > 10

    rows = await every_row(url)
    assert found_in(rows, secrets_of(grace) + secrets_of(ada)) == []
    for workflow_id in (done, refused):
        assert await _kept(url, workflow_id) == before[workflow_id]
        record = await client.get(workflow_id)
        assert record.input.startswith("@erased:")
        payload_texts = [
            v
            for table in rows.values()
            for row in table
            if workflow_id in row
            for v in row
            if isinstance(v, str) and v.startswith("@aes-gcm:")
        ]
        assert payload_texts == []  # no ciphertext kept either
    assert (await client.get(refused)).error.startswith('{"type": "builtins.PermissionError"')  # type: ignore[union-attr]
    assert [r.id for r in await client.list_workflows(error_type="builtins.PermissionError")] == [
        refused
    ]
    with encrypting({"A": KEY}) if encrypted else _plain():
        assert (await client.handle(other).output())["letter"] == "Dear Alan Turing"
    if not encrypted:
        assert found_in(rows, [kept.name]) != []  # the scan sees what is there
    # Its child was started with its data: erased with it, its row kept.
    [child] = children
    child_record = await client.get(child)
    assert child_record.status is WorkflowStatus.SUCCEEDED
    assert child_record.input.startswith("@erased:")


class _plain:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def test_a_replay_over_an_erased_value_is_a_clear_error(any_backend: Backend) -> None:
    """Reading an erased output, retrying an erased workflow (its body would replay over
    erased steps) or forking it: an ``ErasedValueError`` saying so, never a wrong value;
    an unsettled workflow or a missing one is not erased."""
    store = any_backend.store
    client = DurableClient(store)
    done, _ = await run_enrolment(store, person("Grace Hopper"), "approved")
    refused, _ = await run_enrolment(store, person("Ada Lovelace"), "refuse")
    for workflow_id in (done, refused):
        await client.erase(workflow_id)
    with pytest.raises(ErasedValueError, match=r"was erased at .* \(durable erase\)"):
        await client.handle(done).output()
    with pytest.raises(ErasedValueError, match="erased"):
        await client.handle(done).get_event("letter")

    await client.retry(refused)
    assert await WorkflowRunner(store).run_until_complete(refused) is WorkflowStatus.FAILED
    error = await client.handle(refused).error()
    assert error is not None and error["type"] == "durable_core.errors.ErasedValueError"
    assert (
        "was erased at" in error["message"]
        and "cannot be read, replayed or retried" in (error["message"])
    )
    fork = await client.fork(done, from_step=2)
    assert await WorkflowRunner(store).run_until_complete(fork) is WorkflowStatus.FAILED
    forked_error = await fork.error()
    assert forked_error is not None and "was erased at" in forked_error["message"]

    waiting = await client.start_workflow(enrol, person("Alan Turing"))
    await WorkflowRunner(store).run_once(waiting)
    with pytest.raises(InvalidStateError, match="only a succeeded, failed or cancelled"):
        await client.erase(waiting.id)
    assert (await client.get(waiting.id)).input.startswith("{")  # untouched
    with pytest.raises(WorkflowNotFoundError):
        await client.erase("no-such-workflow")


async def test_erase_from_the_cli_and_what_the_dashboard_shows(
    tmp_path: Path, postgres_url: str
) -> None:
    """``durable erase ID`` erases in one line; an unsettled one is refused in one line,
    exit 2; the dashboard shows an erased value as erased; ``pg_dump`` of the database
    holds nothing of it."""
    import httpx

    from durable_postgres import PostgresStore
    from tests.conftest import migrated_postgres_database

    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await migrated_postgres_database(POSTGRES_URL, f"{base}_erase_cli")
    async with PostgresStore(url) as store:
        done, _ = await run_enrolment(store, person("Grace Hopper"), "approved")
        waiting = await DurableClient(store).start_workflow(enrol, person("Alan Turing"))
    erased = _durable("erase", done, "--database-url", url)
    assert erased.returncode == 0, erased.stderr
    assert erased.stdout.startswith(f"workflow {done} erased: ") and erased.stdout.count("\n") == 1
    refused = _durable("erase", waiting.id, "--database-url", url)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "only a succeeded, failed or cancelled" in refused.stderr

    dumped = subprocess.run(
        ["pg_dump", "--data-only", url], capture_output=True, text=True, timeout=300
    )
    assert dumped.returncode == 0, dumped.stderr
    assert "Grace" not in dumped.stdout and "Hopper" not in dumped.stdout
    assert "Alan Turing" in dumped.stdout  # not erased: the dump shows what is there

    async with PostgresStore(url) as store:
        transport = httpx.ASGITransport(app=create_app(store))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
            page = await web.get(f"/workflows/{done}")
    assert page.status_code == 200
    assert '<dt>input</dt><dd class="mono">erased</dd>' in page.text
    assert "Grace" not in page.text


def _durable(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
