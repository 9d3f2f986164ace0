# ruff: noqa: F811 -- the fixtures seeded and browser are test_dashboard's, imported
"""The third security review's attacks on the dashboard (issue 37), each on the real
``durable dashboard`` command (or the documented ``create_app`` served by uvicorn) over a
real PostgreSQL database, in headless Chromium where a page is involved. Each test names
the defect it attacks; the review's other attacks are in ``tests/test_security_attacks.py``.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from durable_core import (
    ConfigurationError,
    DurableClient,
    WorkflowStatus,
    workflow,
    workflow_step,
)
from durable_core.dashboard import create_app
from durable_core.dashboard.oncall import BULK_MAX
from durable_core.seams.operators import WorkflowFilter
from durable_core.testing import WorkflowRunner
from durable_sqlite import SQLiteStore
from tests.raw_sql import fetch
from tests.test_dashboard import (  # noqa: F401 -- the fixtures seeded and browser
    DASHBOARD,
    ROOT,
    TOKEN,
    Seeded,
    Server,
    _accept,
    _free_port,
    _http,
    _listed,
    _start_server,
    _stop,
    _wait_for,
    batch,
    browser,
    checkout,
    inbox,
    seeded,
)

pytestmark = pytest.mark.anyio

SESSION = "durable_dashboard_session"
DURABLE = [sys.executable, "-m", "durable_core"]


def _signed_in(base: str, token: str = TOKEN, cookie: str = "") -> str:
    """Sign in with the form over HTTP; the session cookie's value."""
    headers = {"Cookie": f"{SESSION}={cookie}"} if cookie else {}
    status, answer, _ = _http(
        base, "/login", method="POST", body=urlencode({"token": token}), headers=headers
    )
    assert status == 303, status
    name, _, rest = answer["Set-Cookie"].partition("=")
    assert name == SESSION
    return rest.split(";")[0]


def _as(cookie: str) -> dict[str, str]:
    return {"Cookie": f"{SESSION}={cookie}"}


def _sign_in_with_the_form(driver: WebDriver, base: str, token: str) -> None:
    driver.get(base + "/")
    _wait_for(driver, "form.login")
    box = driver.find_element(By.NAME, "token")
    box.send_keys(token)
    box.submit()


def _refused_at_start(*args: str) -> tuple[int, str]:
    """``durable dashboard ARGS`` that must exit at once: its exit code and output; it
    fails the test if it serves instead (a hang guard of minutes, not a bound)."""
    port = _free_port()
    process = subprocess.Popen(
        [*DASHBOARD, "--port", str(port), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
            continue
        process.kill()
        process.communicate()
        pytest.fail(f"durable dashboard {' '.join(args)} serves: it should refuse to start")
    if process.poll() is None:
        process.kill()
        pytest.fail(f"durable dashboard {' '.join(args)} neither served nor exited")
    return process.returncode, process.communicate()[0]


# -- 1: an empty token ---------------------------------------------------------------------------


async def test_1_an_empty_or_short_token_turns_nothing_off(
    seeded: Seeded, browser: WebDriver
) -> None:
    """``--token ""`` (an unset shell variable) and a short token are refused at start, as
    is ``create_app(token="")``; with a token, an empty sign-in form opens nothing."""
    for token, said in (("", "is empty"), ("abc", "is 3 characters")):
        code, output = _refused_at_start(
            "--database-url", seeded.url, "--host", "0.0.0.0", "--allowed-host", "x",
            "--token", token,
        )  # fmt: skip
        assert code == 2 and output.count("\n") == 1, output
        assert said in output and "at least 16 characters" in output
        with pytest.raises(ConfigurationError, match=said):
            create_app(seeded.store, token=token)
    server = _start_server(seeded.url, "--token", TOKEN)
    try:
        status, headers, body = _http(server.base, "/login", method="POST", body="token=")
        assert status == 401 and "Set-Cookie" not in headers and seeded.failed not in body
        status, headers, _ = _http(server.base, "/login", method="POST", body="")
        assert status == 401 and "Set-Cookie" not in headers
        _sign_in_with_the_form(browser, server.base, "")
        _wait_for(browser, "form.login")
        assert "That token is wrong." in browser.find_element(By.CSS_SELECTOR, "form").text
        assert browser.find_elements(By.CSS_SELECTOR, "tr.row") == []
    finally:
        _stop(server)


# -- 2: ids users choose -------------------------------------------------------------------------

ODD_IDS = [
    "a/b",
    "x#y",
    "what?now=1",
    "..",
    ".",
    "a/../b",
    "100%",
    "%2F",
    "with space",
    "a/b/cancel",
    "commande/numéro 7",
    "注文/東京#1",
    "https://evil.example/",
]


async def test_2_every_page_works_with_ids_users_choose(seeded: Seeded, browser: WebDriver) -> None:
    """Workflows whose ids hold ``/ # ? .. %``, spaces and other scripts: the list links
    to each, each page shows its own workflow, its actions and its live refresh work, the
    search box finds it, and the CLI shows it."""
    client, runner = DurableClient(seeded.store), WorkflowRunner(seeded.store)
    for n, workflow_id in enumerate(ODD_IDS):
        handle = await client.start_workflow_with_id(workflow_id, checkout, f"odd-{n}", n)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
    waiting = await client.start_workflow_with_id("inbox/1#?..", inbox)
    assert await runner.run_once(waiting) is WorkflowStatus.WAITING
    doomed = await client.start_workflow_with_id("../cancel me", inbox)
    assert await runner.run_once(doomed) is WorkflowStatus.WAITING
    server = _start_server(seeded.url)
    try:
        browser.get(f"{server.base}/?name={checkout.name}")
        _wait_for(browser, "tr.row")
        links = browser.execute_script(
            "return [...document.querySelectorAll('tr.row')]"
            ".map(row => [row.dataset.id, row.querySelector('a.id').href])"
        )
        shown = {workflow_id: href for workflow_id, href in links}
        assert set(ODD_IDS) <= set(shown)
        for workflow_id in ODD_IDS:
            browser.get(shown[workflow_id])
            _wait_for(browser, "#status", "succeeded")
            text = browser.execute_script("return document.querySelector('dl dd.mono').textContent")
            assert text == workflow_id, (workflow_id, browser.current_url)
            assert (
                f"odd-{ODD_IDS.index(workflow_id)}"
                in browser.find_element(By.CSS_SELECTOR, "dl").text
            )

        # The search box opens a workflow by its id, whatever it holds.
        for workflow_id in ("a/b", "..", "注文/東京#1"):
            browser.get(server.base + "/")
            box = browser.find_element(By.NAME, "id")
            box.send_keys(workflow_id)
            box.submit()
            _wait_for(browser, "#status")
            text = browser.execute_script("return document.querySelector('dl dd.mono').textContent")
            assert text == workflow_id

        # An unfinished one: its live refresh, a message from its page, then it ends.
        browser.get(f"{server.base}/?status=waiting")
        _wait_for(browser, "tr.row")
        browser.find_element(By.CSS_SELECTOR, f'tr.row[data-id="{waiting.id}"] a.id').click()
        _wait_for(browser, "#send")
        fragment = browser.execute_script(
            "return fetch(document.querySelector('[data-fragment]').dataset.fragment)"
            ".then(r => r.text().then(t => [r.status, t]))"
        )
        assert fragment[0] == 200 and "waits for" in fragment[1]
        browser.find_element(By.NAME, "message").send_keys('"odd ids work"')
        browser.find_element(By.CSS_SELECTOR, "#send button").click()
        _accept(browser)
        _wait_for(browser, "#notice", "Message sent.")
        assert await runner.run_until_complete(waiting) is WorkflowStatus.SUCCEEDED
        assert await waiting.output() == "odd ids work"

        # A parent's page links to its children, and a child's to its parent.
        parent = await client.start_workflow_with_id("parent/1#?%20..", batch, ["P-1"])
        await runner.run_once(parent)
        browser.get(f"{server.base}/?name={batch.name}")
        _wait_for(browser, "tr.row")
        browser.find_element(By.CSS_SELECTOR, "tr.row a.id").click()
        _wait_for(browser, "#children a")
        browser.find_element(By.CSS_SELECTOR, "#children a").click()
        _wait_for(browser, "#parent", parent.id)
        browser.find_element(By.ID, "parent").click()
        _wait_for(browser, "#children a")
        shown_id = browser.execute_script("return document.querySelector('dl dd.mono').textContent")
        assert shown_id == parent.id

        # Cancel (an id starting with "..") and fork (the id "..") from their pages.
        browser.get(f"{server.base}/?status=waiting")
        _wait_for(browser, "tr.row")
        browser.find_element(By.CSS_SELECTOR, f'tr.row[data-id="{doomed.id}"] a.id').click()
        _wait_for(browser, "#cancel")
        browser.find_element(By.ID, "cancel").click()
        _accept(browser)
        _wait_for(browser, "#status", "cancelled")
        assert (await client.get(doomed.id)).status is WorkflowStatus.CANCELLED
        browser.get(shown[".."])
        _wait_for(browser, "form.fork button")
        browser.find_elements(By.CSS_SELECTOR, "form.fork button")[1].click()
        _accept(browser)
        _wait_for(browser, "#notice", "runs again from step 1")
    finally:
        _stop(server)

    # The CLI lists and shows them, one line each.
    listed = subprocess.run(
        [*DURABLE, "list", "--name", checkout.name, "--limit", "100", "--database-url", seeded.url],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    for workflow_id in ODD_IDS:
        assert any(
            line.startswith(f"{workflow_id:36}  succeeded") for line in listed.stdout.splitlines()
        )
    for workflow_id in ("a/b", "..", "what?now=1"):
        shown_id = subprocess.run(
            [*DURABLE, "show", workflow_id, "--database-url", seeded.url],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert shown_id.returncode == 0, shown_id.stderr
        assert shown_id.stdout.splitlines()[0] == f"workflow  {workflow_id}"


# -- 6: bulk actions ---------------------------------------------------------------------------


@workflow
async def queued(n: int) -> int:
    return n


async def test_6_a_bulk_action_covers_what_it_confirmed_and_no_more(
    seeded: Seeded, browser: WebDriver
) -> None:
    """The confirmation counts and covers at most ``BULK_MAX`` workflows; its POST acts on
    no more than it showed and nothing created since; a POST that skips the confirmation
    (no ``created_before``, no count, or a count past the bound) does nothing."""
    client = DurableClient(seeded.store)
    total = BULK_MAX + 205
    await client.start_workflows(queued, [(n,) for n in range(total)])
    server = _start_server(seeded.url)
    bearer: dict[str, str] = {}
    try:
        for forged in (
            {"name": queued.name},
            {"name": queued.name, "created_before": "2999-01-01T00:00:00+00:00"},
            {"name": queued.name, "created_before": "2999-01-01T00:00:00+00:00", "limit": "100000"},
        ):
            status, _, body = _http(
                server.base, "/bulk/cancel", method="POST", body=urlencode(forged), headers=bearer
            )
            assert status == 400, (forged, body)
        assert await client.count_workflows(_where(), statuses=[WorkflowStatus.PENDING]) == total

        browser.get(f"{server.base}/?name={queued.name}")
        _wait_for(browser, "#bulk-cancel")
        browser.find_element(By.ID, "bulk-cancel").click()
        _wait_for(browser, "#count", str(total))
        assert browser.find_element(By.ID, "limit").text == str(BULK_MAX)
        assert f"At most {BULK_MAX} at a time" in browser.find_element(By.ID, "batch").text
        late = await client.start_workflow(queued, -1)  # after the count: not covered
        browser.find_element(By.ID, "do-bulk").click()
        _wait_for(browser, "#notice", f"Cancelled {BULK_MAX} workflows.")
        pending = await client.count_workflows(_where(), statuses=[WorkflowStatus.PENDING])
        assert pending == total - BULK_MAX + 1
        assert (await client.get(late.id)).status is WorkflowStatus.PENDING
    finally:
        _stop(server)


def _where() -> WorkflowFilter:
    return WorkflowFilter(name=queued.name)


# -- 7: sessions -------------------------------------------------------------------------------


async def test_7_sessions_are_ended_by_sign_out_expiry_and_a_restart(
    seeded: Seeded, browser: WebDriver, tmp_path: Path
) -> None:
    """Each sign-in gets its own random session (two in the same second differ); signing
    out ends it for good (the cookie replayed is refused); signing in again replaces the
    browser's session; a restart (a new token) ends them all; a session expires."""
    server = _start_server(seeded.url, "--token", TOKEN)
    try:
        first, second = _signed_in(server.base), _signed_in(server.base)
        assert first != second
        for cookie in (first, second):
            assert _http(server.base, "/", headers=_as(cookie))[0] == 200

        # The browser signs in and out; its cookie, replayed, opens nothing.
        _sign_in_with_the_form(browser, server.base, TOKEN)
        _wait_for(browser, "tr.row")
        kept = browser.get_cookie(SESSION)
        assert kept is not None and kept["httpOnly"] and kept["sameSite"] == "Strict"
        browser.find_element(By.CSS_SELECTOR, "form.logout button").click()
        _wait_for(browser, "form.login")
        assert _http(server.base, "/", headers=_as(kept["value"]))[0] == 401
        assert _http(server.base, "/", headers=_as(first))[0] == 200  # another one's lives

        # Signing in again with a session replaces it (no fixation).
        third = _signed_in(server.base, cookie=first)
        assert third != first
        assert _http(server.base, "/", headers=_as(first))[0] == 401
        assert _http(server.base, "/", headers=_as(third))[0] == 200
    finally:
        _stop(server)

    # A new token (a restart) signs everyone out.
    other = _start_server(seeded.url, "--token", TOKEN[::-1])
    try:
        assert _http(other.base, "/", headers=_as(third))[0] == 401
    finally:
        _stop(other)

    # A session lasts session_max_age seconds.
    app = create_app(seeded.store, token=TOKEN, session_max_age=1)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
        signed = await web.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303
        assert (await web.get("/")).status_code == 200
        time.sleep(1.5)
        assert (await web.get("/")).status_code == 401


# -- 8: guessing the token ---------------------------------------------------------------------


async def test_8_guessing_the_token_is_slowed_down_and_logged(seeded: Seeded) -> None:
    """Past a few wrong tokens from one address (by the form or as a bearer), that address
    is refused (429, with Retry-After) without its guesses being checked, the right token
    included, and each wrong one is logged with the address; another address is not."""
    server = _start_server(seeded.url, "--token", TOKEN, "--forwarded-allow-ips", "127.0.0.1")
    try:
        statuses = []
        for n in range(12):
            guess = urlencode({"token": f"guess-{n:02d}-guess-guess"})
            statuses.append(_http(server.base, "/login", method="POST", body=guess)[0])
        statuses.append(_http(server.base, "/", headers={"Authorization": "Bearer nope"})[0])
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}, statuses
        status, headers, _ = _http(server.base, "/login", method="POST", body=f"token={TOKEN}")
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert _http(server.base, "/", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 429
        elsewhere = {"X-Forwarded-For": "10.9.8.7"}
        assert _signed_in_from(server.base, elsewhere)
    finally:
        _stop(server)
    log = server.process.communicate()[0]
    assert log.count("wrong token from 127.0.0.1") >= 6, log
    assert "refusing it for" in log and TOKEN not in log


def _signed_in_from(base: str, headers: dict[str, str]) -> bool:
    status, answer, _ = _http(
        base, "/login", method="POST", body=urlencode({"token": TOKEN}), headers=headers
    )
    return status == 303 and SESSION in answer["Set-Cookie"]


# -- 9: the documented create_app example and the access log -------------------------------------


async def test_9_the_documented_create_app_example_logs_no_token(tmp_path: Path) -> None:
    """The ``create_app`` example of docs/how-to/dashboard.md, served by uvicorn with its
    access log on: a token typed into a URL is refused and never written to the log."""
    page = (ROOT / "docs" / "how-to" / "dashboard.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    [example] = [block for block in blocks if "create_app(" in block]
    (tmp_path / "ops_app.py").write_text(example)
    port = _free_port()
    token = "ops-" + "7" * 40
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "ops_app:app", "--port", str(port)],
        cwd=tmp_path,
        env={**_environ(), "OPS_DASHBOARD_TOKEN": token, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = Server(f"http://127.0.0.1:{port}", process)
    local = {"Host": "localhost"}
    try:
        _wait_until_it_answers(server.base, "/durable/static/dashboard.css", process, "localhost")
        in_url = _http(server.base, f"/durable/?token={token}", headers=local)
        form = urlencode({"token": token})
        signed = _http(server.base, "/durable/login", method="POST", body=form, headers=local)
    finally:
        _stop(server)
    log = process.communicate()[0]
    assert token not in log, log
    assert "GET /durable/?token=*** HTTP/1.1" in log, log
    status, _, body = in_url
    assert status == 401 and "A token in a URL is refused" in body
    status, answer, _ = signed
    assert status == 303 and token not in answer["Set-Cookie"]


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_")}


def _wait_until_it_answers(
    base: str, path: str, process: subprocess.Popen[str], host: str | None = None
) -> None:
    """Until the server at ``base`` answers ``path`` (with ``Host: host``) with a 200."""
    deadline = time.monotonic() + 120
    while True:
        try:
            if _http(base, path, headers={"Host": host} if host else None)[0] == 200:
                return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"it did not start: {process.communicate()[0]}")
        time.sleep(0.1)


# -- 10: unhandled input ------------------------------------------------------------------------


class _BuggyStore(SQLiteStore):
    """A store plugin with a bug: reading a workflow raises what no store should."""

    async def get_workflow(self, workflow_id: str) -> None:
        raise RuntimeError("a bug in a store plugin, holding postgresql://u:hunter2@db/x")


async def test_10_unhandled_input_gets_an_answer_not_a_crash(
    seeded: Seeded, browser: WebDriver, tmp_path: Path
) -> None:
    """A message nested 100,000 deep is a 400; a 20 MB form a 413; a 1 MB error a page of
    a few kilobytes; a server error carries the security headers and nothing of the bug;
    an out-of-range port (the database's or the dashboard's) is one line and exit 2; the
    dashboard on ``::1`` answers its own ``[::1]`` Host."""
    client, runner = DurableClient(seeded.store), WorkflowRunner(seeded.store)
    huge = await client.start_workflow(fails_with, "x" * 1_000_000)
    assert await runner.run_until_complete(huge) is WorkflowStatus.FAILED
    server = _start_server(seeded.url)
    try:
        for message, said in (
            ("[" * 100_000, "nested too deeply"),
            (json.dumps("x" * 20_000_000), "a form is at most 1 MiB"),
        ):
            browser.get(f"{server.base}/workflows/{quote(seeded.waiting, safe='')}")
            _wait_for(browser, "#send")
            browser.execute_script(
                "document.querySelector('#send input[name=message]').value = arguments[0]",
                message,
            )
            browser.find_element(By.CSS_SELECTOR, "#send button").click()
            _accept(browser)
            _wait_for(browser, "#problem", said)
        inbox_rows = "SELECT count(*) FROM workflow_messages WHERE workflow_id = :id"
        assert await fetch(seeded.url, inbox_rows, {"id": seeded.waiting}) == [(0,)]
        browser.get(f"{server.base}/workflows/{huge.id}")
        _wait_for(browser, "#error")
        size = len(browser.page_source)
        assert size < 200_000, size
        assert "more characters" in browser.find_element(By.ID, "error").text
    finally:
        _stop(server)

    buggy = _BuggyStore(f"sqlite:///{tmp_path / 'buggy.db'}")
    async with buggy:
        await buggy.apply_schema()
        transport = httpx.ASGITransport(app=create_app(buggy), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
            crashed = await web.get("/?id=anything")
        assert crashed.status_code == 500
        assert "frame-ancestors 'none'" in crashed.headers["content-security-policy"]
        assert crashed.headers["x-frame-options"] == "DENY"
        assert crashed.headers["cache-control"] == "no-store"
        assert "hunter2" not in crashed.text and "bug" not in crashed.text

    for args, said in (
        (["--database-url", "postgresql://postgres@127.0.0.1:99999/x"], "port 99999 is not a port"),
        (["--database-url", seeded.url, "--port", "99999"], "99999' is not a port number"),
    ):
        ran = subprocess.run(
            [*DASHBOARD, *args], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stderr
        assert said in ran.stderr and "Traceback" not in ran.stderr

    port = _free_port()
    process = subprocess.Popen(
        [*DASHBOARD, "--database-url", seeded.url, "--host", "::1", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    v6 = Server(f"http://[::1]:{port}", process)
    try:
        _wait_until_it_answers(v6.base, "/static/dashboard.css", process)
        status, _, body = _http(v6.base, "/")
        assert status == 200 and seeded.failed in body
        assert _http(v6.base, "/", headers={"Host": "[::2]:80"})[0] == 400
    finally:
        _stop(v6)
    assert f"on http://[::1]:{port}/" in process.communicate()[0]


@workflow_step
async def raise_it(text: str) -> None:
    raise ValueError(text)


@workflow(max_attempts=1)
async def fails_with(text: str) -> None:
    await raise_it(text)


def _form_action(base: str, page: str, confirm: str, headers: dict[str, str]) -> str:
    """The path a form of ``page`` posts to (the form whose confirmation starts with
    ``confirm``), as the page gives it."""
    status, _, body = _http(base, page, headers=headers)
    assert status == 200, status
    found = re.search(rf'<form method="post" action="([^"]+)"[^>]*data-confirm="{confirm}', body)
    assert found is not None, body[:2000]
    return urlsplit(found[1]).path


# -- 13: the informational findings --------------------------------------------------------------


async def test_13_origin_scheme_no_store_and_masked_inputs(
    seeded: Seeded, browser: WebDriver
) -> None:
    """A form from the same host over another scheme is cross-site; pages are kept in no
    cache (the static files are); a workflow's input is shown with its credentials masked,
    as its error is."""
    client, runner = DurableClient(seeded.store), WorkflowRunner(seeded.store)
    leaky = await client.start_workflow(fails_with, "connect postgresql://app:hunter2@db/orders")
    assert await runner.run_until_complete(leaky) is WorkflowStatus.FAILED
    server = _start_server(seeded.url, "--token", TOKEN)
    try:
        host = urlsplit(server.base).netloc
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        other_scheme = {"Origin": f"https://{host}", **bearer}
        target = f"/workflows/{quote(seeded.waiting, safe='')}"
        cancel = _form_action(server.base, target, "Cancel this workflow", bearer)
        status, _, _ = _http(
            server.base, cancel, method="POST", body="action=cancel", headers=other_scheme
        )
        assert status == 403
        assert (await client.get(seeded.waiting)).status is WorkflowStatus.WAITING
        for page in ("/", "/login", target):
            assert _http(server.base, page, headers=bearer)[1]["Cache-Control"] == "no-store"
        assert _http(server.base, "/static/dashboard.css")[1]["Cache-Control"] != "no-store"

        _sign_in_with_the_form(browser, server.base, TOKEN)
        _wait_for(browser, "tr.row")
        browser.get(f"{server.base}/workflows/{leaky.id}")
        _wait_for(browser, "#error")
        text = browser.find_element(By.TAG_NAME, "body").text
        assert "hunter2" not in text
        assert "postgresql://app:***@db/orders" in browser.find_element(By.CSS_SELECTOR, "dl").text
    finally:
        _stop(server)
