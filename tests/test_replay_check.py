"""The replay check: histories of workflows in flight, replayed through new code without
running anything, report each divergence (workflow, step index, recorded and new call).

In-process on SQLite and PostgreSQL with registries holding the old and the new code;
the ``durable export`` / ``durable replay-check`` commands as real processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from durable_core import (
    DurableClient,
    Registry,
    WorkflowStatus,
    patched,
    recv,
    sleep,
    workflow,
    workflow_step,
)
from durable_core.runtime.replay import Divergence, History, check_histories, export, replay_check
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from tests.side_effects import effect

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
OLD, NEW = Registry(), Registry()


@workflow_step(name="orders.reserve")
async def reserve(item: str) -> str:
    effect(f"reserve:{item}")
    return f"reserved {item}"


@workflow_step(name="orders.charge")
async def charge(item: str) -> str:
    effect(f"charge:{item}")
    return f"charged {item}"


@workflow_step(name="orders.charge_card")
async def charge_card(item: str) -> str:
    effect(f"charge_card:{item}")
    return f"charged {item}"


@workflow(name="orders.place", registry=OLD)
async def place_v1(item: str) -> str:
    await reserve(item)
    await charge(item)
    return str(await recv("shipped"))


@workflow(name="orders.place", registry=NEW)
async def place_v2(item: str) -> str:
    """Renames the charge: the histories that charged already diverge."""
    await reserve(item)
    await charge_card(item)
    return str(await recv("shipped"))


@workflow(name="orders.patched", registry=OLD)
async def patched_v1(item: str) -> str:
    await reserve(item)
    await charge(item)
    return str(await recv("shipped"))


@workflow(name="orders.patched", registry=NEW)
async def patched_v2(item: str) -> str:
    """The same rename behind a patch marker: the old histories still replay."""
    await reserve(item)
    if await patched("card"):
        await charge_card(item)
    else:
        await charge(item)
    return str(await recv("shipped"))


@workflow(name="orders.fanout", registry=OLD)
async def fanout_v1(items: list[str]) -> list[str]:
    async def one(item: str) -> str:
        await reserve(item)
        await sleep(3600)
        return await charge(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


@workflow(name="orders.fanout", registry=NEW)
async def fanout_v2(items: list[str]) -> list[str]:
    """Its branches swap order: every branch's first call now meets another's record."""

    async def one(item: str) -> str:
        await reserve(item)
        await sleep(3600)
        return await charge(item)

    return list(await asyncio.gather(*(one(i) for i in reversed(items))))


@workflow(name="orders.fanout_same", registry=OLD)
async def fanout_same_v1(items: list[str]) -> list[str]:
    async def one(item: str) -> str:
        await reserve(item)
        await sleep(3600)
        return await charge(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


@workflow(name="orders.fanout_same", registry=NEW)
async def fanout_same_v2(items: list[str]) -> list[str]:
    async def one(item: str) -> str:
        await reserve(item)
        await sleep(3600)
        return await charge(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


@workflow(name="orders.shortened", registry=OLD)
async def shortened_v1(item: str) -> str:
    await reserve(item)
    await charge(item)
    return "done"


@workflow(name="orders.shortened", registry=NEW)
async def shortened_v2(item: str) -> str:
    """Returns before the call its history goes on with."""
    await reserve(item)
    return "done"


@pytest.fixture
def store(sqlite_or_postgres: Store) -> Store:
    return sqlite_or_postgres


async def _in_flight(store: Store) -> dict[str, str]:
    """Workflows of the old code, each left waiting where its body stands."""
    client, runner = DurableClient(store), WorkflowRunner(store, registry=OLD)
    ids = {}
    for name, flow, arg in (
        ("place", place_v1, "lamp"),
        ("patched", patched_v1, "desk"),
        ("fanout", fanout_v1, ["a", "b"]),
        ("fanout_same", fanout_same_v1, ["c", "d"]),
    ):
        handle = await client.start_workflow(flow, arg)  # type: ignore[arg-type]
        assert await runner.run_once(handle) is WorkflowStatus.WAITING
        ids[name] = handle.id
    return ids


TAGS = [f"{step}:{item}" for step in ("reserve", "charge", "charge_card") for item in "abcd"] + [
    f"{step}:{item}" for step in ("reserve", "charge", "charge_card") for item in ("lamp", "desk")
]


async def test_the_check_reports_each_diverging_workflow_and_runs_nothing(
    store: Store, effects: Callable[[str], int]
) -> None:
    ids = await _in_flight(store)
    ran_before = {tag: effects(tag) for tag in TAGS}
    report = await replay_check(store, NEW)
    assert report.checked == 4
    by_id = {d.workflow_id: d for d in report.divergences}
    assert set(by_id) == {ids["place"], ids["fanout"]}
    place = by_id[ids["place"]]
    assert (place.step_index, place.recorded, place.called) == (
        1,
        "orders.charge",
        "orders.charge_card",
    )
    assert place.workflow_name == "orders.place" and "index 1" in place.message
    fanout = by_id[ids["fanout"]]
    assert fanout.step_index == 0 and fanout.path == "0:0"
    assert (fanout.recorded, fanout.called) == ("orders.reserve", "orders.reserve")
    assert "with input" in fanout.message, "each branch met the other's reserve"
    assert {tag: effects(tag) for tag in TAGS} == ran_before, "no step ran"
    assert ran_before["charge:lamp"] == 1 and ran_before["reserve:a"] == 1
    # The old code replays everything, and the check wrote nothing: the rows still wait.
    assert (await replay_check(store, OLD)).divergences == []
    for workflow_id in ids.values():
        assert (await DurableClient(store).get(workflow_id)).status is WorkflowStatus.WAITING


async def test_a_body_that_returns_before_its_history_ends_diverges(
    store: Store, effects: Callable[[str], int]
) -> None:
    client = DurableClient(store)
    handle = await client.start_workflow(shortened_v1, "chair")
    assert await WorkflowRunner(store, registry=OLD).run_once(handle) is WorkflowStatus.SUCCEEDED
    assert (await replay_check(store, NEW)).checked == 0, "by default only runs in flight"
    report = await replay_check(store, NEW, workflow_ids=[handle.id])  # named: checked anyway
    assert report.checked == 1 and len(report.divergences) == 1
    assert "returned after replaying 1 of the 2 recorded calls" in report.divergences[0].message
    found = await check_histories_of([await export(store, handle.id)], OLD)
    assert found == [], "the old code replays its own history to the end"


async def check_histories_of(histories: list[History], registry: Registry) -> list[Divergence]:
    from durable_core.runtime.replay import replay

    return [d for h in histories if (d := await replay(h, registry)) is not None]


async def test_exported_histories_replay_from_files_in_a_test(
    store: Store, tmp_path: Path, effects: Callable[[str], int]
) -> None:
    ids = await _in_flight(store)
    for name, workflow_id in ids.items():
        history = await export(store, workflow_id)
        (tmp_path / f"{name}.json").write_text(json.dumps(history.to_json()))
    found = await check_histories(sorted(tmp_path.glob("*.json")), NEW)
    assert sorted(d.workflow_id for d in found) == sorted([ids["place"], ids["fanout"]])
    assert await check_histories(sorted(tmp_path.glob("*.json")), OLD) == []


def _durable(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", *args, "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


async def test_export_and_replay_check_commands(
    tmp_path: Path, effects: Callable[[str], int]
) -> None:
    db = tmp_path / "flight.db"
    url = f"sqlite:///{db}"
    from durable_sqlite import SQLiteStore

    async with SQLiteStore(url) as store:
        await store.apply_schema()
        client, runner = DurableClient(store), WorkflowRunner(store, registry=OLD)
        old = await client.start_workflow(place_v1, "lamp")
        assert await runner.run_once(old) is WorkflowStatus.WAITING
        greet_registry = Registry()

        @workflow_step(name="greet.hello")
        async def hello(name: str) -> str:
            return f"hello {name}"

        @workflow(name="greet.wait", registry=greet_registry)
        async def greet(name: str) -> str:
            said = await hello(name)
            return f"{said}, {await recv('reply')}"

        same = await client.start_workflow(greet, "ada")
        assert await WorkflowRunner(store, registry=greet_registry).run_once(same) is (
            WorkflowStatus.WAITING
        )

    out = tmp_path / "place.json"
    exported = _durable("export", old.id, "--out", str(out), url=url)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(out.read_text())["workflow_name"] == "orders.place"

    app = ["--app", "tests.replay_apps.orders_new"]
    checked = _durable("replay-check", *app, url=url)
    assert checked.returncode == 1, checked.stderr
    [line] = checked.stdout.splitlines()
    assert line.startswith(
        f"{old.id} orders.place at index 1: recorded orders.charge, new orders.charge_card: "
    ), line
    assert "2 workflow(s) checked; 1 diverge" in checked.stderr
    only_greet = _durable("replay-check", *app, "--workflow", same.id, url=url)
    assert only_greet.returncode == 0 and "1 workflow(s) checked; 0 replay" in only_greet.stderr
    from_file = _durable("replay-check", *app, "--history", str(out), "--json", url=url)
    assert from_file.returncode == 1
    assert [d["step_index"] for d in json.loads(from_file.stdout)["divergences"]] == [1]

    no_app = _durable("replay-check", url=url)
    assert no_app.returncode == 2 and no_app.stderr.count("\n") == 1
    assert "needs --app" in no_app.stderr
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    bad = _durable("replay-check", *app, "--history", str(tmp_path / "bad.json"), url=url)
    assert bad.returncode == 2 and "is not a workflow history" in bad.stderr
    assert bad.stderr.count("\n") == 1
