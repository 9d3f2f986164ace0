"""The dashboard in headless Chromium: the real ``durable dashboard`` command serving a real
PostgreSQL database, whose workflows a real runner ran; each action is checked in the database.
"""

from __future__ import annotations

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
from pathlib import Path

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
    WorkflowConfig,
    WorkflowStatus,
    recv,
    start_workflow,
    workflow,
    workflow_step,
)
from durable_core.dashboard.serve import check_serving
from durable_core.errors import ConfigurationError
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from tests.conftest import POSTGRES_URL, drop_postgres_database, fresh_postgres_database

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
# README's screenshots are taken by this test: into docs/ with DURABLE_UPDATE_SCREENSHOTS=1,
# elsewhere into a temporary folder, so a test run leaves the checkout as it was.
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


def _start_server(database_url: str, *extra: str) -> Server:
    """``durable dashboard`` in a subprocess, once it answers."""
    port = _free_port()
    process = subprocess.Popen(
        [*DASHBOARD, "--database-url", database_url, "--port", str(port), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{base}/static/dashboard.css", timeout=2).close()
            return Server(base, process)
        except (urllib.error.URLError, ConnectionError):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                output = process.communicate()[0]
                raise RuntimeError(f"the dashboard did not start: {output}") from None
            time.sleep(0.1)


def _stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
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
    wait = WebDriverWait(driver, 10)
    if text is None:
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))
    else:
        wait.until(expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))


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

    # Retry puts it back to pending; a runner then finishes it.
    driver.find_element(By.ID, "retry").click()
    _wait_for(driver, "#notice", "retried")
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
    WebDriverWait(driver, 5).until(expected_conditions.alert_is_present())
    driver.switch_to.alert.accept()
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
    shown = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#backlog tbody tr"):
        queue, pending, running, waiting, _ = (
            cell.text for cell in row.find_elements(By.TAG_NAME, "td")
        )
        shown[queue] = (int(pending), int(running), int(waiting))
    assert shown == {
        q: tuple(counted.get((q, s), 0) for s in ("pending", "running", "waiting"))
        for q in ("billing", "default")
    }
    assert shown["billing"][0] == 1
    legend = driver.find_element(By.CSS_SELECTOR, "#backlog-chart").text
    assert "billing" in legend and "default" in legend


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
        WebDriverWait(browser, 15).until(lambda d: _listed(d)[:1] == [late.id])
    finally:
        _stop(server)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(_NoRedirect())
    try:
        with opener.open(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


async def test_token_guards_pages_and_actions(seeded: Seeded) -> None:
    with pytest.raises(ConfigurationError, match="give it a --token"):
        check_serving("0.0.0.0", None)
    check_serving("0.0.0.0", "t0ken")
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

    # The URL's password (trust authentication ignores it) is shown on no page.
    with_password = seeded.url.replace("://postgres@", "://postgres:hunter2@")
    assert "hunter2" in with_password
    server = _start_server(with_password, "--token", "s3cret")
    try:
        status, body = _get(f"{server.base}/")
        assert status == 401 and "needs its token" in body and seeded.failed not in body
        status, _ = _get(f"{server.base}/?token=wrong")
        assert status == 401
        status, body = _get(f"{server.base}/", {"Authorization": "Bearer s3cret"})
        assert status == 200 and seeded.failed in body
        assert "s3cret" not in body and "hunter2" not in body and "127.0.0.1:5432" in body
        request = urllib.request.Request(
            f"{server.base}/workflows/{seeded.waiting}/cancel",
            method="POST",
            headers={"Authorization": "Bearer s3cret", "Origin": "https://evil.example"},
        )
        with pytest.raises(urllib.error.HTTPError) as refusal:
            urllib.request.urlopen(request, timeout=5)
        assert refusal.value.code == 403
        unauthorized = urllib.request.Request(
            f"{server.base}/workflows/{seeded.waiting}/cancel", method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refusal:
            urllib.request.urlopen(unauthorized, timeout=5)
        assert refusal.value.code == 401
        assert (await DurableClient(seeded.store).get(seeded.waiting)).status is (
            WorkflowStatus.WAITING
        )
    finally:
        _stop(server)


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
