"""The dashboard in headless Chromium: the real ``durable dashboard`` command serving a real
PostgreSQL database, whose workflows a real runner ran; each action is checked in the database.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from durable_core import (
    DurableClient,
    Schedule,
    WorkflowConfig,
    WorkflowStatus,
    recv,
    start_workflow,
    workflow,
    workflow_step,
)
from durable_core.dashboard.serve import check_serving
from durable_core.definitions.schedules import tick_workflow_id
from durable_core.errors import ConfigurationError
from durable_core.seams.operators import WorkerRecord, WorkflowFilter
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from tests.conftest import POSTGRES_URL, drop_postgres_database, fresh_postgres_database

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
# The docs' dashboard pictures (docs/how-to/dashboard.md) are taken by this test: into docs/
# with DURABLE_UPDATE_SCREENSHOTS=1, elsewhere into a temporary folder, so a test run leaves
# the checkout as it was.
SHOTS = (
    ROOT / "docs"
    if os.environ.get("DURABLE_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="durable-dashboard-shots-"))
)
SCREENSHOT = SHOTS / "dashboard.png"
WORKFLOW_SCREENSHOT = SHOTS / "dashboard-workflow.png"


def assert_png(path: Path) -> None:
    """``path`` holds a PNG picture of a real page (not an empty window)."""
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000, path


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOKEN = "s3cret-dashboard-token"
DASHBOARD = [sys.executable, "-m", "durable_core", "dashboard"]
BROKEN: set[str] = set()


@workflow_step
async def reserve(order: str) -> str:
    return f"reserved {order}"


@workflow_step
async def charge(order: str, cents: int) -> dict[str, object]:
    if order in BROKEN:
        raise ConnectionError(f"card API down while charging {order}")
    return {"order": order, "charged": cents}


@workflow(max_attempts=1)
async def checkout(order: str, cents: int) -> dict[str, object]:
    await reserve(order)
    return await charge(order, cents)


FLAKY: dict[str, int] = {}


@workflow_step
async def flaky_charge(order: str) -> str:
    FLAKY[order] = FLAKY.get(order, 0) + 1
    if FLAKY[order] <= 2:
        raise ConnectionError(f"<b>card API</b> down, try {FLAKY[order]} of {order}")
    return f"charged {order}"


@workflow(max_attempts=3)
async def retried_checkout(order: str) -> str:
    await reserve(order)
    return await flaky_charge(order)


@workflow
async def inbox() -> str:
    return str(await recv("go"))


@workflow
async def batch(orders: list[str]) -> list[object]:
    children = [await start_workflow(checkout, order, 100) for order in orders]
    return [await child.output() for child in children]


class InvalidOrder(ValueError):
    pass


@workflow_step
async def check(order: str) -> str:
    if order.startswith("bad"):
        raise InvalidOrder(f"order {order} has no lines")
    if order.startswith("gone"):
        raise KeyError(order)
    return order


@workflow(max_attempts=1)
async def validate(order: str) -> str:
    return await check(order)


@workflow_step
async def count_to(n: int) -> int:
    return n


@workflow
async def long_run(n: int) -> int:
    for i in range(n):
        await count_to(i)
    return n


@dataclass
class Seeded:
    store: PostgresStore
    url: str
    failed: str
    waiting: str
    parent: str
    children: list[str]
    succeeded: list[str]


@pytest.fixture
async def seeded() -> AsyncIterator[Seeded]:
    """A fresh database with failed, succeeded, waiting, parent and child workflows."""
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await fresh_postgres_database(POSTGRES_URL, f"{base}_dashboard")
    store = PostgresStore(url)
    await store.open()
    await store.apply_schema()
    client, runner = DurableClient(store), WorkflowRunner(store)
    BROKEN.clear()
    try:
        succeeded = []
        for n in range(3):
            handle = await client.start_workflow(checkout, f"ok-{n}", 250 + n)
            assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
            succeeded.append(handle.id)
        BROKEN.add("A-17")
        billing = client.with_options(queue="billing", priority=5)
        failed = await billing.start_workflow(checkout, "A-17", 1999)
        assert await runner.run_until_complete(failed) is WorkflowStatus.FAILED
        waiting = await client.start_workflow(inbox)
        await runner.run_once(waiting)
        parent = await client.start_workflow(batch, ["B-1", "B-2"])
        await runner.run_once(parent)
        children = [r.id for r in await client.list_workflows(parent_id=parent.id)]
        assert len(children) == 2
        assert await waiting.status() is WorkflowStatus.WAITING
        yield Seeded(store, url, failed.id, waiting.id, parent.id, children, succeeded)
    finally:
        await store.close()
        await drop_postgres_database(url)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    base: str
    process: subprocess.Popen[str]


def _start_server(database_url: str, *extra: str, env: dict[str, str] | None = None) -> Server:
    """``durable dashboard`` in a subprocess, once it answers (with ``env`` in place of
    this process's ``DURABLE_*`` variables, when given)."""
    port = _free_port()
    environment = None
    if env is not None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_")}
        environment.update(env)
    process = subprocess.Popen(
        [*DASHBOARD, "--database-url", database_url, "--port", str(port), *extra],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/static/dashboard.css", timeout=10).close()
            return Server(base, process)
        except OSError:  # refused, reset, or no answer yet on a loaded machine
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                output = process.communicate()[0]
                raise RuntimeError(f"the dashboard did not start: {output}") from None
            time.sleep(0.1)


def _stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """Headless Chromium from Debian's packages (.ci/run installs them)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(path), f"{path} is required: apt-get install chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,860"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def _wait_for(driver: WebDriver, css: str, text: str | None = None) -> None:
    wait = WebDriverWait(driver, 60)  # only stops a hung test
    if text is None:
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))
    else:
        wait.until(expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))


def _accept(driver: WebDriver) -> None:
    """Accept the confirmation the click asked for."""
    WebDriverWait(driver, 60).until(expected_conditions.alert_is_present())
    driver.switch_to.alert.accept()


def _listed(driver: WebDriver) -> list[str]:
    # Read in one go: a live refresh may replace the rows between two element lookups.
    script = "return [...document.querySelectorAll('tr.row')].map(row => row.dataset.id)"
    return list(driver.execute_script(script))


async def test_pages_filters_and_actions(seeded: Seeded, browser: WebDriver) -> None:
    server = _start_server(seeded.url)
    try:
        await _exercise(seeded, browser, server.base)
    finally:
        _stop(server)


async def _exercise(seeded: Seeded, driver: WebDriver, base: str) -> None:
    store, client = seeded.store, DurableClient(seeded.store)
    everything = [r.id for r in await client.list_workflows(limit=100)]
    assert len(everything) == 8

    # The list: every workflow, newest first, with its status.
    driver.get(base + "/")
    _wait_for(driver, "tr.row")
    assert _listed(driver) == everything
    assert "postgres" in driver.find_element(By.CSS_SELECTOR, ".store").text
    SCREENSHOT.parent.mkdir(exist_ok=True)
    driver.save_screenshot(str(SCREENSHOT))
    assert_png(SCREENSHOT)

    # Filters: by status through the form, by name, by creation time.
    Select(driver.find_element(By.NAME, "status")).select_by_value("failed")
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    _wait_for(driver, "tr.row .status", "failed")
    assert _listed(driver) == [seeded.failed]
    driver.get(base + "/")
    queue = driver.find_element(By.NAME, "queue")
    queue.send_keys("billing")
    queue.submit()
    _wait_for(driver, "tr.row")
    assert _listed(driver) == [seeded.failed]
    driver.get(base + "/")
    name = driver.find_element(By.NAME, "name")
    name.send_keys(inbox.name)
    name.submit()
    _wait_for(driver, "tr.row")
    assert _listed(driver) == [seeded.waiting]
    record = await client.get(seeded.failed)
    since = (record.created_at).strftime("%Y-%m-%dT%H:%M:%S.%f")
    newer = [r.id for r in await client.list_workflows(created_after=record.created_at)]
    driver.get(f"{base}/?created_after={since}")
    _wait_for(driver, "tr.row")
    assert _listed(driver) == newer and seeded.failed in newer and seeded.succeeded[0] not in newer

    # Search by id opens the workflow page; a failed one shows its steps and its error.
    driver.get(base + "/")
    search = driver.find_element(By.NAME, "id")
    search.send_keys(seeded.failed)
    search.submit()
    _wait_for(driver, "#error", "ConnectionError")
    error = driver.find_element(By.ID, "error").text
    assert "card API down while charging A-17" in error and "Traceback" in error
    steps = driver.find_elements(By.CSS_SELECTOR, "#steps li.step")
    names = [s.find_element(By.CSS_SELECTOR, ".name").text for s in steps]
    assert [name.rsplit(".", 1)[-1] for name in names] == ["reserve", "charge"]
    assert [s.find_element(By.CSS_SELECTOR, ".status").text for s in steps] == [
        "succeeded",
        "failed",
    ]
    assert "A-17" in driver.find_element(By.CSS_SELECTOR, "dl").text  # the decoded input
    assert driver.find_element(By.ID, "queue").text == "billing, priority 5"
    assert "failed" in driver.find_element(By.ID, "attempts").text
    driver.set_window_size(1280, 1180)
    driver.save_screenshot(str(WORKFLOW_SCREENSHOT))
    assert_png(WORKFLOW_SCREENSHOT)
    driver.set_window_size(1280, 860)

    # Retry asks first: dismissed, nothing changes; accepted, it is pending again.
    driver.find_element(By.ID, "retry").click()
    WebDriverWait(driver, 60).until(expected_conditions.alert_is_present())
    driver.switch_to.alert.dismiss()
    assert (await client.get(seeded.failed)).status is WorkflowStatus.FAILED
    driver.find_element(By.ID, "retry").click()
    _accept(driver)
    _wait_for(driver, "#notice", "Retried")
    after = await client.get(seeded.failed)
    assert after.status is WorkflowStatus.PENDING and after.attempts == 0
    BROKEN.clear()
    assert await WorkflowRunner(store).run_until_complete(client.handle(seeded.failed)) is (
        WorkflowStatus.SUCCEEDED
    )
    driver.refresh()
    _wait_for(driver, "#status", "succeeded")
    assert "1999" in driver.find_element(By.ID, "output").text

    # Cancel (after the confirmation) ends a waiting workflow, in the database too.
    driver.get(f"{base}/workflows/{seeded.waiting}")
    assert "a message on topic 'go'" in driver.find_element(By.ID, "waiting").text
    driver.find_element(By.ID, "cancel").click()
    _accept(driver)
    _wait_for(driver, "#status", "cancelled")
    assert (await client.get(seeded.waiting)).status is WorkflowStatus.CANCELLED
    driver.get(base + "/?status=cancelled")
    _wait_for(driver, "tr.row")
    assert _listed(driver) == [seeded.waiting]

    # Parent and children link to each other.
    driver.get(f"{base}/workflows/{seeded.parent}")
    links = driver.find_elements(By.CSS_SELECTOR, "#children a")
    assert sorted(link.text for link in links) == sorted(seeded.children)
    assert "child workflow" in driver.find_element(By.ID, "waiting").text
    links[0].click()
    _wait_for(driver, "#parent", seeded.parent)

    # Run again from a step: a new workflow whose step cache holds the steps before it.
    driver.get(f"{base}/workflows/{seeded.succeeded[0]}")
    driver.find_elements(By.CSS_SELECTOR, "form.fork button")[1].click()
    _accept(driver)
    _wait_for(driver, "#notice", "runs again from step 1")
    fork_id = driver.current_url.rsplit("/", 1)[-1].split("?")[0]
    fork = await client.get(fork_id)
    assert fork.status is WorkflowStatus.PENDING and fork.name == checkout.name
    assert [s.step_index for s in await client.handle(fork_id).steps()] == [0]

    # The queue charts draw the backlog the store counts, one line per queue.
    await client.with_options(queue="billing").start_workflow(checkout, "B-9", 5)
    driver.get(base + "/queues")
    _wait_for(driver, "#backlog tbody td", "billing")
    _wait_for(driver, "#backlog-chart canvas")
    _wait_for(driver, "#throughput-chart canvas")
    counted: dict[tuple[str, str], int] = {}
    for c in await client.backlog():
        counted[c.queue, c.status.value] = counted.get((c.queue, c.status.value), 0) + c.count
    shown: dict[str, tuple[int, int, int]] = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#backlog tbody tr"):
        queue_name, pending, running, waiting, _ = (
            cell.text for cell in row.find_elements(By.TAG_NAME, "td")
        )
        shown[queue_name] = (int(pending), int(running), int(waiting))
    assert shown == {
        q: tuple(counted.get((q, s), 0) for s in ("pending", "running", "waiting"))
        for q in ("billing", "default")
    }
    assert shown["billing"][0] == 1
    legend = driver.find_element(By.CSS_SELECTOR, "#backlog-chart").text
    assert "billing" in legend and "default" in legend

    await _on_call(seeded, driver, base)


def _shot(driver: WebDriver, name: str, height: int = 860) -> None:
    """A screenshot of the page for docs/screenshots/ (the docs' pictures)."""
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, height)
    path = SHOTS / "screenshots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    assert_png(path)
    driver.set_window_size(width, 860)


def _cells(driver: WebDriver, css: str) -> list[list[str]]:
    # Read in one go: a refresh may replace the rows between two element lookups.
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(row => [...row.querySelectorAll('td')].map(cell => cell.innerText.trim()))"
    )
    return list(driver.execute_script(script, css))


async def _on_call(seeded: Seeded, driver: WebDriver, base: str) -> None:
    """The on-call pages, each checked against the database, and their screenshots."""
    store, client = seeded.store, DurableClient(seeded.store)
    runner = WorkflowRunner(store)
    invalid = [(await client.start_workflow(validate, f"bad-{n}")).id for n in range(3)]
    missing = (await client.start_workflow(validate, "gone-1")).id
    for workflow_id in [*invalid, missing]:
        assert await runner.run_until_complete(workflow_id) is WorkflowStatus.FAILED
    long = await client.start_workflow(long_run, 230)
    assert await runner.run_until_complete(long) is WorkflowStatus.SUCCEEDED
    now = datetime.now(UTC)
    served = (checkout.name, batch.name, inbox.name, long_run.name)
    worker = WorkerRecord(
        "host-a:4242:c0ffee", "host-a", 4242, 8, ("billing", "default"), served, 2, now, now, now
    )
    await store.beat_worker(worker, 3600)
    await client.add_schedule("nightly-checkout", checkout, Schedule("0 3 * * *", args=["N-1", 5]))

    # The list shows each failure's error; the error type filters it.
    driver.get(base + "/?status=failed")
    _wait_for(driver, "tr.row")
    errors = {row[0]: row[-1] for row in _cells(driver, "tr.row")}
    assert errors[invalid[0]] == "InvalidOrder order bad-0 has no lines"
    assert errors[missing] == "KeyError 'gone-1'"
    kind = f"{__name__}.InvalidOrder"
    box = driver.find_element(By.NAME, "error")
    box.send_keys(kind)
    box.submit()
    _wait_for(driver, "#bulk")
    assert _listed(driver) == [r.id for r in await client.list_workflows(error_type=kind)]
    assert sorted(_listed(driver)) == sorted(invalid)

    # Failures: counted by error type and name, as the store counts them.
    driver.get(base + "/failures")
    _wait_for(driver, "#failures tr.group")
    counted = await client.error_counts(WorkflowFilter(status=WorkflowStatus.FAILED))
    assert [row[:3] for row in _cells(driver, "#failures tr.group")] == [
        [c.name, c.error_type or "(no type)", str(c.count)] for c in counted
    ]
    assert [validate.name, kind, "3"] in [row[:3] for row in _cells(driver, "tr.group")]
    _shot(driver, "failures")

    # Bulk retry of one group: the count, a confirmation, then each is pending again.
    group = next(
        row for row in driver.find_elements(By.CSS_SELECTOR, "tr.group") if kind in row.text
    )
    group.find_element(By.CSS_SELECTOR, "a.retry").click()
    _wait_for(driver, "#count", "3")
    assert "Retry 3 workflows?" in driver.find_element(By.ID, "confirm").text
    _shot(driver, "bulk-retry")
    driver.find_element(By.ID, "do-bulk").click()
    _wait_for(driver, "#notice", "Retried 3 workflows.")
    for workflow_id in invalid:
        assert (await client.get(workflow_id)).status is WorkflowStatus.PENDING
    assert (await client.get(missing)).status is WorkflowStatus.FAILED

    # Bulk cancel from the list's filters: the unfinished ones of the name.
    driver.get(f"{base}/?name={validate.name}")
    driver.find_element(By.ID, "bulk-cancel").click()
    _wait_for(driver, "#count", "3")
    driver.find_element(By.ID, "do-bulk").click()
    _wait_for(driver, "#notice", "Cancelled 3 workflows.")
    for workflow_id in invalid:
        assert (await client.get(workflow_id)).status is WorkflowStatus.CANCELLED

    # Workers: the live one with what it serves; a warning for what nobody serves.
    unserved_id = (await client.start_workflow(validate, "ok-1")).id
    driver.get(base + "/workers")
    _wait_for(driver, "#workers tr.worker")
    [shown] = _cells(driver, "#workers tr.worker")
    assert shown[:5] == ["host-a:4242:c0ffee", "host-a", "4242", "2 / 8", "billing, default"]
    assert checkout.name in shown[5] and validate.name not in shown[5]
    warning = driver.find_element(By.CSS_SELECTOR, ".unserved").text
    assert f"no live worker serves {validate.name} (queue default): 1 pending" in warning
    _shot(driver, "workers")
    driver.get(f"{base}/workflows/{unserved_id}")
    _wait_for(driver, "#unserved", f"no live worker serves {validate.name}")

    # Schedules: next fire times; pause, resume (each confirmed) and trigger now.
    driver.get(base + "/schedules")
    _wait_for(driver, "tr.schedule")
    schedule = await client.get_schedule("nightly-checkout")
    upcoming = driver.find_element(By.CSS_SELECTOR, "tr.schedule td.next").text.splitlines()
    assert upcoming[0] == f"{schedule.next_tick:%Y-%m-%d %H:%M:%S}" and len(upcoming) == 3
    driver.find_element(By.CSS_SELECTOR, "button.pause").click()
    _accept(driver)
    _wait_for(driver, "#notice", "Paused")
    assert (await client.get_schedule("nightly-checkout")).paused
    driver.find_element(By.CSS_SELECTOR, "button.resume").click()
    _accept(driver)
    _wait_for(driver, "#notice", "Resumed")
    assert not (await client.get_schedule("nightly-checkout")).paused
    driver.find_element(By.CSS_SELECTOR, "button.trigger").click()
    _accept(driver)
    _wait_for(driver, "#notice", "Started its workflow now.")
    triggered = driver.current_url.rsplit("/", 1)[-1].split("?")[0]
    record = await client.get(triggered)
    assert record.name == checkout.name and record.headers is not None
    assert record.headers["durable-schedule"] == "nightly-checkout"
    assert await runner.run_until_complete(triggered) is WorkflowStatus.SUCCEEDED
    driver.get(base + "/schedules")
    _wait_for(driver, "tr.schedule .runs .status", "succeeded")
    _shot(driver, "schedules")
    # Backfill: a past window's ticks, one run each.
    form = driver.find_element(By.CSS_SELECTOR, "form.backfill")
    form.find_element(By.NAME, "start").send_keys("2026-01-01T00:00")
    form.find_element(By.NAME, "end").send_keys("2026-01-03T00:00")
    form.find_element(By.CSS_SELECTOR, "button.backfill").click()
    _accept(driver)
    _wait_for(driver, "#notice", "Backfilled: started 2 workflows")
    for day in (1, 2):
        tick = datetime(2026, 1, day, 3, tzinfo=UTC)
        backfilled = await client.get(tick_workflow_id("nightly-checkout", tick))
        assert backfilled.headers is not None
        assert backfilled.headers["durable-schedule-tick"] == tick.isoformat()

    # Keeping up: the last hour and day, as the database counts them.
    driver.get(base + "/queues")
    _wait_for(driver, "#activity-1 tr.queue")
    hour = {a.queue: a for a in await client.activity(3600)}
    rows = {row[0]: row for row in _cells(driver, "#activity-1 tbody tr")}
    for queue, activity in hour.items():
        created, started, _, ended = rows[queue][2:6]
        assert (created, started, ended) == (
            str(activity.created),
            str(activity.started),
            str(activity.finished),
        )
    total = rows["all"]
    assert total[2] == str(sum(a.created for a in hour.values()))
    assert total[7].startswith(str(sum(a.ended.get("failed", 0) for a in hour.values())))
    _wait_for(driver, "#backlog-chart canvas")
    _shot(driver, "queues", height=1100)

    # A waiting workflow is sent a message from its page, and runs to its end.
    waiting = await client.start_workflow(inbox)
    assert await runner.run_once(waiting) is WorkflowStatus.WAITING
    driver.get(f"{base}/workflows/{waiting.id}")
    _wait_for(driver, "#send")
    assert driver.find_element(By.NAME, "topic").get_attribute("value") == "go"
    driver.find_element(By.NAME, "message").send_keys('"ship it"')
    _shot(driver, "workflow-send")
    driver.find_element(By.CSS_SELECTOR, "#send button").click()
    _accept(driver)
    _wait_for(driver, "#notice", "Message sent.")
    assert await runner.run_until_complete(waiting) is WorkflowStatus.SUCCEEDED
    assert await waiting.output() == "ship it"

    # A workflow of 230 steps shows them a hundred at a time.
    driver.get(f"{base}/workflows/{long.id}")
    indexes = "return [...document.querySelectorAll('#steps .index')].map(e => +e.innerText)"
    _wait_for(driver, "#steps li.step")
    assert driver.execute_script(indexes) == list(range(100))
    driver.find_element(By.ID, "later-steps").click()
    _wait_for(driver, "#step-range", "from 100")
    assert driver.execute_script(indexes) == list(range(100, 200))
    driver.find_element(By.ID, "later-steps").click()
    _wait_for(driver, "#step-range", "from 200")
    assert driver.execute_script(indexes) == list(range(200, 230))
    assert driver.find_elements(By.ID, "later-steps") == []
    driver.find_element(By.ID, "earlier-steps").click()
    _wait_for(driver, "#step-range", "from 100")

    # The list at 800 px: no sideways scrolling, the error column still there.
    driver.set_window_size(800, 860)
    driver.get(base + "/?status=failed")
    _wait_for(driver, "tr.row")
    width = "return [document.documentElement.scrollWidth, window.innerWidth]"
    scrolled, inner = driver.execute_script(width)
    assert scrolled <= inner, (scrolled, inner)
    error_cell = driver.find_element(By.CSS_SELECTOR, f'tr.row[data-id="{missing}"] td.err')
    assert error_cell.is_displayed() and "KeyError" in error_cell.text
    _shot(driver, "list-800")
    driver.set_window_size(1280, 860)

    # X-Forwarded-Proto is not honoured unless the dashboard is told to trust a proxy.
    status, body = _get(base + "/", {"X-Forwarded-Proto": "https"})
    assert status == 200 and f'href="{base}/static/dashboard.css"' in body


async def test_the_workflow_page_lists_each_failed_try_escaped(
    seeded: Seeded, browser: WebDriver
) -> None:
    handle = await DurableClient(seeded.store).start_workflow(retried_checkout, "C-3")
    runner = WorkflowRunner(seeded.store, WorkflowConfig(retry_backoff_secs=0))
    assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    server = _start_server(seeded.url)
    try:
        browser.get(f"{server.base}/workflows/{handle.id}")
        _wait_for(browser, "#steps li.step")
        reserved, charged = browser.find_elements(By.CSS_SELECTOR, "#steps li.step")
        assert reserved.find_elements(By.CSS_SELECTOR, ".failed-try") == []
        tries = charged.find_elements(By.CSS_SELECTOR, ".failed-try")
        assert [t.find_element(By.CSS_SELECTOR, ".try").text for t in tries] == ["try 1", "try 2"]
        assert [t.find_element(By.CSS_SELECTOR, ".why").text for t in tries] == [
            f"builtins.ConnectionError: <b>card API</b> down, try {n} of C-3" for n in (1, 2)
        ]
        # The error's markup is shown as text: the type is the only bold element.
        assert [len(t.find_elements(By.CSS_SELECTOR, ".why b")) for t in tries] == [1, 1]
        assert "UTC" in tries[0].find_element(By.CSS_SELECTOR, ".when").text
    finally:
        _stop(server)


async def test_list_pages_and_live_refresh(seeded: Seeded, browser: WebDriver) -> None:
    client = DurableClient(seeded.store)
    await client.start_workflows(checkout, [(f"bulk-{n}", n) for n in range(60)])
    newest = [r.id for r in await client.list_workflows(name=checkout.name, limit=200)]
    server = _start_server(seeded.url)
    try:
        browser.get(f"{server.base}/?name={checkout.name}")
        _wait_for(browser, "tr.row")
        first = _listed(browser)
        assert first == newest[:50]
        browser.find_element(By.ID, "older").click()
        _wait_for(browser, "#newest", "newest")
        assert _listed(browser) == newest[50:]

        # The first page refreshes itself: a workflow started now appears without a reload.
        browser.get(f"{server.base}/?name={checkout.name}")
        _wait_for(browser, "tr.row")
        late = await client.start_workflow(checkout, "late", 1)
        WebDriverWait(browser, 60).until(lambda d: _listed(d)[:1] == [late.id])
    finally:
        _stop(server)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(_NoRedirect())
    try:
        with opener.open(request, timeout=60) as response:  # only stops a hung test
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _http(
    base: str,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: str = "",
) -> tuple[int, http.client.HTTPMessage, str]:
    """One request to the server at ``base``, with exactly these headers (a foreign Host
    included); redirects are not followed."""
    netloc = urlsplit(base).netloc
    connection = http.client.HTTPConnection(netloc, timeout=60)  # only stops a hung test
    sent = {"Host": netloc, **(headers or {})}
    if body:
        sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
    try:
        connection.request(method, path, body=body.encode() or None, headers=sent)
        response = connection.getresponse()
        return response.status, response.headers, response.read().decode()
    finally:
        connection.close()


def _framed_headers_are_refused(headers: http.client.HTTPMessage) -> None:
    assert headers["X-Frame-Options"] == "DENY"
    csp = headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"


async def test_attacks_on_the_dashboard_are_refused(seeded: Seeded) -> None:
    """Each attack of the security review, on the real command serving a real database."""
    with pytest.raises(ConfigurationError, match="give it a --token"):
        check_serving("0.0.0.0", None)
    with pytest.raises(ConfigurationError, match="--allowed-host"):
        check_serving("0.0.0.0", TOKEN)
    assert check_serving("0.0.0.0", TOKEN, ["ops.example.com"]) == [
        "localhost",
        "127.0.0.1",
        "::1",
        "ops.example.com",
    ]
    assert "10.1.2.3" in check_serving("10.1.2.3", TOKEN)
    check_serving("::1", None)
    refused = subprocess.run(
        [*DASHBOARD, "--database-url", seeded.url, "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "DURABLE_DASHBOARD_TOKEN"},
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "give it a --token" in refused.stderr

    # The URL's passwords (trust authentication ignores them) show on no page; this server
    # trusts X-Forwarded-Proto from 127.0.0.1, as behind a local proxy.
    database = seeded.url.rsplit("/", 1)[-1]
    with_password = seeded.url.replace("://postgres@", "://postgres:hunter2@")
    with_password += "?sslpassword=hunter2"
    server = _start_server(with_password, "--token", TOKEN, "--forwarded-allow-ips", "127.0.0.1")
    base, client = server.base, DurableClient(seeded.store)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    try:
        # Signed out: the sign-in page, framed by nobody, telling nothing of the database.
        status, headers, body = _http(base, "/")
        assert status == 401 and "needs its token" in body
        for secret in ("hunter2", "PostgreSQL", "127.0.0.1:5432", database, seeded.failed):
            assert secret not in body
        _framed_headers_are_refused(headers)
        assert _http(base, "/?token=wrong")[0] == 401
        status, headers, body = _http(base, "/", headers=bearer)
        assert status == 200 and seeded.failed in body and "127.0.0.1:5432" in body
        assert TOKEN not in body and "hunter2" not in body
        _framed_headers_are_refused(headers)

        # A foreign Host (a DNS-rebinding page: its own name, its own origin) is refused,
        # with the bearer token even; so is a cross-site form under the right Host.
        cancel, act = f"/workflows/{seeded.waiting}", "action=cancel"
        evil = {"Host": "evil.example:8484", "Origin": "http://evil.example:8484"}
        status, headers, _ = _http(
            base, cancel, method="POST", headers={**evil, **bearer}, body=act
        )
        assert status == 400
        _framed_headers_are_refused(headers)
        assert _http(base, "/", headers={"Host": "evil.example", **bearer})[0] == 400
        cross = {"Origin": "https://evil.example", **bearer}
        assert _http(base, cancel, method="POST", headers=cross, body=act)[0] == 403
        blind = {"Sec-Fetch-Site": "cross-site", **bearer}
        assert _http(base, cancel, method="POST", headers=blind, body=act)[0] == 403
        assert _http(base, cancel, method="POST", body=act)[0] == 401
        assert (await client.get(seeded.waiting)).status is WorkflowStatus.WAITING

        # Signing in keeps a session's random id, not the token: HttpOnly, SameSite=Strict,
        # and Secure when the (trusted) proxy says the request came over https.
        form = urlencode({"token": TOKEN})
        status, headers, _ = _http(base, "/login", method="POST", body=form)
        assert status == 303
        cookie = headers["Set-Cookie"]
        name, _, rest = cookie.partition("=")
        value = rest.split(";")[0]
        flags = cookie.lower()
        assert name == "durable_dashboard_session" and "s3cret" not in value
        assert "czNjcmV0" not in value  # nor the token in base64
        assert len(value) >= 43  # 256 random bits
        assert "httponly" in flags and "samesite=strict" in flags and "secure" not in flags
        proxied = {"X-Forwarded-Proto": "https"}
        status, headers, _ = _http(base, "/login", method="POST", body=form, headers=proxied)
        assert status == 303 and "; secure" in headers["Set-Cookie"].lower()
        signed = {"Cookie": f"{name}={value}"}
        status, _, body = _http(base, "/failures", headers=signed)
        assert status == 200 and "hunter2" not in body
        tampered = {"Cookie": f"{name}={value[:-2]}x{value[-1]}"}
        assert _http(base, "/", headers=tampered)[0] == 401
        assert _http(base, "/", headers={"Cookie": f"{name}=signed_in"})[0] == 401

        # ?notice= shows only the dashboard's own notices: no text of the link's author.
        for injected in (
            "/?notice=%3Cscript%3Ealert(1)%3C/script%3E",
            "/?notice=Your+session+expired%2C+sign+in+at+evil.example",
            "/?notice=retried-many&count=%3Cb%3E9%3C/b%3E",
            f"/workflows/{seeded.waiting}?notice=cancelled%20by%20your%20admin",
        ):
            status, _, body = _http(base, injected, headers=signed)
            assert status == 200 and 'id="notice"' not in body, injected
            assert "evil.example" not in body and "alert(1)" not in body and "<b>9" not in body
        status, _, body = _http(base, "/?notice=retried-many&count=12", headers=signed)
        assert '<p class="notice" id="notice">Retried 12 workflows.</p>' in body

        # No page shows the password (nor does a page for a missing workflow).
        for page in (
            "/",
            f"/workflows/{seeded.failed}",
            "/workflows/no-such-id",
            "/failures",
            "/workers",
            "/schedules",
            "/queues",
            "/queues/data",
            "/bulk/retry?status=failed",
        ):
            status, _, body = _http(base, page, headers=signed)
            assert status in (200, 404) and "hunter2" not in body, page
    finally:
        _stop(server)
    log = server.process.communicate()[0]
    assert "hunter2" not in log
    await _no_page_shows_a_password_whatever_its_form(seeded)


async def _no_page_shows_a_password_whatever_its_form(seeded: Seeded) -> None:
    """Each credential form of the URL, in-process: the pages, and the sign-in page."""
    import httpx

    from durable_core.dashboard import create_app
    from tests.test_redaction import PG_FORMS, SECRET

    database = seeded.url.rsplit("/", 1)[-1]
    for form in PG_FORMS:
        url = form.replace(POSTGRES_URL.rsplit("/", 1)[-1], database, 1)
        store = PostgresStore(url)
        await store.open()
        try:
            app = create_app(store, token=TOKEN)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
                signed_out = await web.get("/")
                assert signed_out.status_code == 401
                for detail in ("127.0.0.1", database, SECRET):
                    assert detail not in signed_out.text
                for page in ("/", f"/workflows/{seeded.failed}", "/failures", "/queues"):
                    shown = await web.get(page, headers={"Authorization": f"Bearer {TOKEN}"})
                    assert shown.status_code == 200, page
                    assert database in shown.text
                    assert SECRET not in shown.text and "hun%40ter2" not in shown.text, url
        finally:
            await store.close()


async def test_mounted_in_another_app(seeded: Seeded) -> None:
    """``create_app`` mounted under a path of the user's own ASGI app, on its event loop."""
    import anyio
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    from durable_core.dashboard import create_app

    async def home(request: object) -> PlainTextResponse:
        return PlainTextResponse("the user's own page")

    app = Starlette(routes=[Route("/", home), Mount("/ops/durable", app=create_app(seeded.store))])
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    base = f"http://127.0.0.1:{port}"
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve)
        while not server.started:  # noqa: ASYNC110 - uvicorn only offers this flag
            await anyio.sleep(0.05)
        try:
            status, body = await anyio.to_thread.run_sync(_get, f"{base}/")
            assert (status, body) == (200, "the user's own page")
            status, body = await anyio.to_thread.run_sync(_get, f"{base}/ops/durable/")
            assert status == 200
            assert f'href="{base}/ops/durable/workflows/{seeded.failed}"' in body
            assert f"{base}/ops/durable/static/dashboard.css" in body
            page = f"{base}/ops/durable/workflows/{seeded.failed}"
            status, body = await anyio.to_thread.run_sync(_get, page)
            assert status == 200 and "card API down while charging A-17" in body
            status, _ = await anyio.to_thread.run_sync(_get, f"{base}/ops/durable/queues/data")
            assert status == 200
        finally:
            server.should_exit = True
