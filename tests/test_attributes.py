"""Searchable attributes in process (SQLite): a body sets them once per call site, a start
and a caller set them, lists and ``durable list --attr`` filter by them, and bad input
gets a clear error."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from durable_core import (
    AttributeRange,
    ConfigurationError,
    DurableClient,
    FrameworkError,
    WorkflowNotFoundError,
    WorkflowStatus,
    recv,
    set_attributes,
    workflow,
    workflow_step,
)
from durable_core.caller.sync import SyncClient
from durable_core.cli import main
from durable_core.seams.attributes import AttributeValue, filter_term, parse_filter
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore
from tests.side_effects import effect
from tests.test_cli import durable

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """The root logger as it was: a command run in-process sets its own handler and level."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@workflow_step
async def price(order: str) -> float:
    effect(f"price:{order}")
    return 120.5


@workflow
async def tagged_order(order: str, customer: str) -> str:
    await set_attributes(customer=customer, stage="priced")
    amount = await price(order)
    await set_attributes({"amount": amount, "stage": None})
    await recv("ship")
    await set_attributes(shipped=True)
    return order


@workflow_step
async def inside_a_step() -> None:
    await set_attributes(customer="x")


@workflow
async def sets_from_a_step() -> None:
    await inside_a_step()


async def test_a_body_sets_them_once_and_a_replay_writes_nothing(
    sqlite_store: SQLiteStore, effects: object
) -> None:
    client = DurableClient(sqlite_store)
    runner = WorkflowRunner(sqlite_store)
    handle = await client.start_workflow(tagged_order, "o-1", "acme")
    assert await runner.run_once(handle) is WorkflowStatus.WAITING
    assert await handle.attributes() == {"amount": 120.5, "customer": "acme"}
    # A caller changes one meanwhile: the replay does not write the body's value again.
    await handle.set_attributes(customer="acme-eu")
    await client.send(handle.id, None, topic="ship")
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.attributes() == {"amount": 120.5, "customer": "acme-eu", "shipped": True}
    steps = [s.step_name for s in await handle.steps()]
    assert steps.count("durable.set_attributes") == 3
    found = await client.list_workflows(attributes={"customer": "acme-eu", "shipped": True})
    assert [r.id for r in found] == [handle.id]
    # A fork replays the calls that set them: it starts with the original's.
    forked = await client.fork(handle.id, from_step=3)
    assert await forked.attributes() == await handle.attributes()


async def test_a_start_carries_them_and_lists_filter_by_them(sqlite_store: SQLiteStore) -> None:
    client = DurableClient(sqlite_store)
    acme = client.with_options(attributes={"customer": "acme"})
    small = await acme.with_options(attributes={"amount": 5}).start_workflow(
        tagged_order, "o-2", "acme"
    )
    big = await acme.with_options(attributes={"amount": 500}).start_workflow(
        tagged_order, "o-3", "acme"
    )
    other = await client.with_options(
        attributes={"customer": "globex", "amount": 50}
    ).start_workflow(tagged_order, "o-4", "globex")
    assert await small.attributes() == {"amount": 5, "customer": "acme"}

    async def ids(**filters: object) -> list[str]:
        return [r.id for r in await client.list_workflows(attributes=filters)]  # type: ignore[arg-type]

    assert await ids(customer="acme") == [big.id, small.id]
    assert await ids(amount=AttributeRange(10, 1000)) == [other.id, big.id]
    assert await ids(customer="acme", amount=AttributeRange(max=10)) == [small.id]
    first = await client.list_workflows(attributes={"customer": "acme"}, limit=1)
    rest = await client.list_workflows(attributes={"customer": "acme"}, before=first[0].id)
    assert [r.id for r in first + rest] == [big.id, small.id]
    await client.set_attributes(other.id, customer=None)
    assert await ids(amount=50) == [other.id]
    assert await ids(customer="globex") == []


async def test_bad_input_gets_a_clear_error(sqlite_store: SQLiteStore) -> None:
    client = DurableClient(sqlite_store)
    with pytest.raises(ConfigurationError, match="is a str, an int, a float or a bool"):
        client.with_options(attributes={"when": object()})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="attribute name is 1 to 64"):
        await client.list_workflows(attributes={"x" * 65: 1})
    with pytest.raises(ConfigurationError, match="finite number"):
        await client.list_workflows(attributes={"amount": float("nan")})
    with pytest.raises(ConfigurationError, match="min 5 is above its max 1"):
        AttributeRange(5, 1)
    with pytest.raises(ConfigurationError, match="at most 2\\*\\*53"):
        await client.set_attributes("any", big=2**60)
    with pytest.raises(WorkflowNotFoundError, match="nope"):
        await client.set_attributes("nope", customer="acme")
    with pytest.raises(FrameworkError, match="works only in a workflow body"):
        await set_attributes(customer="acme")
    runner = WorkflowRunner(sqlite_store)
    handle = await client.start_workflow(sets_from_a_step)
    assert await runner.run_until_complete(handle) is WorkflowStatus.FAILED
    assert "set_attributes() works in a workflow body, not inside a step" in str(
        (await handle.info()).error
    )


def test_a_filter_term_reads_as_its_type() -> None:
    assert parse_filter("customer=acme") == ("customer", "acme")
    assert parse_filter("amount=10") == ("amount", 10)
    assert parse_filter("amount=10.5..") == ("amount", AttributeRange(min=10.5))
    assert parse_filter("amount=..100") == ("amount", AttributeRange(max=100))
    assert parse_filter("amount=1..2") == ("amount", AttributeRange(1, 2))
    assert parse_filter('zip="02139"') == ("zip", "02139")
    assert parse_filter("rush=true") == ("rush", True)
    assert parse_filter("region=us east") == ("region", "us east")
    for bad, why in [
        ("customer", "NAME=VALUE"),
        ("=acme", "NAME=VALUE"),
        ("amount=a..b", "a range's end is a number"),
        ("amount=..", "needs an end"),
        ("bad name=1", "attribute name"),
    ]:
        with pytest.raises(ConfigurationError, match=why):
            parse_filter(bad)


async def test_durable_list_filters_by_attributes(
    sqlite_store: SQLiteStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = DurableClient(sqlite_store)
    mine = await client.with_options(attributes={"customer": "acme", "amount": 50}).start_workflow(
        tagged_order, "o-5", "acme"
    )
    await client.with_options(attributes={"customer": "acme", "amount": 500}).start_workflow(
        tagged_order, "o-6", "acme"
    )
    db = ["--database-url", f"sqlite:///{tmp_path / 'durable.db'}"]
    filters = ["--attr", "customer=acme", "--attr", "amount=10..100"]
    listed = durable("list", *db, *filters, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [mine.id]

    async def run(*argv: str) -> tuple[int, str, str]:
        # In a thread: the command runs its own event loop, as from a shell.
        code = await anyio.to_thread.run_sync(main, ["--log-level", "WARNING", *argv, *db])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = await run("show", mine.id)
    assert code == 0 and "attributes amount=50, customer=acme" in out.splitlines()
    code, out, _ = await run("show", "--json", mine.id)
    assert json.loads(out)["attributes"] == {"amount": 50, "customer": "acme"}
    code, out, err = await run("list", "--attr", "amount")
    assert (code, out) == (2, "")
    assert err == "durable: error: an attribute filter is NAME=VALUE, got 'amount'\n"


async def test_the_dashboard_lists_by_attributes(sqlite_store: SQLiteStore) -> None:
    import httpx

    from durable_core.dashboard import create_app

    client = DurableClient(sqlite_store)
    mine = await client.with_options(attributes={"customer": "acme", "amount": 50}).start_workflow(
        tagged_order, "o-7", "acme"
    )
    theirs = await client.with_options(attributes={"customer": "globex"}).start_workflow(
        tagged_order, "o-8", "globex"
    )
    transport = httpx.ASGITransport(app=create_app(sqlite_store))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
        everything = await web.get("/")
        assert mine.id in everything.text and theirs.id in everything.text
        page = await web.get("/", params={"attr": "customer=acme, amount=10..100"})
        assert page.status_code == 200
        assert mine.id in page.text and theirs.id not in page.text
        assert 'value="customer=acme, amount=10..100"' in page.text
        shown = await web.get(f"/workflows/{mine.id}")
        assert shown.status_code == 200
        assert 'href="http://localhost/?attr=customer%3Dacme">customer=acme</a>' in shown.text
        assert 'href="http://localhost/?attr=amount%3D50">amount=50</a>' in shown.text
        bad = await web.get("/", params={"attr": "amount"})
        assert bad.status_code == 400
        assert "an attribute filter is NAME=VALUE, got &#39;amount&#39;" in bad.text


def test_the_sync_client_sets_and_lists_them(tmp_path: Path) -> None:
    with SyncClient(f"sqlite:///{tmp_path / 'sync.db'}") as client:
        client.apply_schema()
        acme = client.with_options(attributes={"customer": "acme"})
        started = acme.with_options(attributes={"amount": 5}).start_workflow(
            tagged_order, "o-9", "acme"
        )
        assert started.attributes() == {"amount": 5, "customer": "acme"}
        client.set_attributes(started.id, amount=None)
        started.set_attributes(region="eu")
        assert started.attributes() == {"customer": "acme", "region": "eu"}
        found = client.list_workflows(attributes={"region": "eu"})
        assert [r.id for r in found] == [started.id]


def test_a_value_shown_as_a_term_reads_back_as_itself() -> None:
    values: list[AttributeValue] = ["acme", "02139", "true", "12.5", "us east", 12, 12.5, True]
    for value in [*values, False]:
        term = filter_term("x", value)
        assert term is not None
        name, read = parse_filter(term)
        assert (name, read, type(read)) == ("x", value, type(value)), term
    assert filter_term("x", "a,b") is None and filter_term("x", "1..2") is None
