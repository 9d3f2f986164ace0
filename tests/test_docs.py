"""The docs' reference pages that are written by hand say what the code does.

(The generated ones cannot drift: docs_hooks.py renders them from the code when
``make docs`` builds the site, and a stale API name fails that build.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import docs_hooks
from durable_core.runtime.config import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "reference" / "configuration.md"
LIBRARY = ["durable_core", "durable_postgres", "durable_sqlite", "durable_mysql"]


def _rows() -> dict[str, list[str]]:
    """The configuration table: variable -> its other cells."""
    rows = {}
    for line in CONFIGURATION.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([A-Z_]+)`", cells[0])
        if match:
            rows[match.group(1)] = cells[1:]
    return rows


def test_the_configuration_page_gives_each_settings_default_and_minimum() -> None:
    rows = _rows()
    for setting in SETTINGS:
        assert setting.env in rows, f"{setting.env} is missing from {CONFIGURATION.name}"
        default, notes = rows[setting.env]
        assert default == f"`{setting.default}`", f"{setting.env}: default {default}"
        if setting.minimum > 0 or "(min" in notes:
            assert f"(min {setting.minimum})" in notes, f"{setting.env}: {notes}"


def test_the_configuration_page_names_every_variable_the_library_reads() -> None:
    read = set()
    for package in LIBRARY:
        for path in (ROOT / package).rglob("*.py"):
            read |= set(re.findall(r"\"(DURABLE_[A-Z_]+)\"", path.read_text("utf-8")))
    read |= {setting.env for setting in SETTINGS}
    assert len(read) >= 15, f"the pattern found too few variables: {sorted(read)}"
    missing = sorted(read - set(_rows()))
    assert not missing, f"{CONFIGURATION.name} does not name {missing}"


DOCS = ROOT / "docs"
PAGES = sorted(page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built as ``make docs`` builds it (strict: a warning fails it)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _nav_pages() -> set[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    return set(re.findall(r":\s+([\w/.-]+\.md)\s*$", nav, flags=re.M))


def test_every_page_is_in_the_nav_and_on_the_home_pages_list() -> None:
    assert len(PAGES) > 30, "the pages were not found"
    assert sorted(_nav_pages()) == PAGES
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    assert docs_hooks.unreachable_pages(PAGES, set(), home) == [], "missing from Where to go"


def test_the_reachability_check_finds_a_page_nothing_leads_to() -> None:
    home = "See [the glossary](reference/glossary.md#fencing) and [x](how-to/../index.md)."
    pages = ["index.md", "reference/glossary.md", "how-to/orphan.md"]
    assert docs_hooks.unreachable_pages(pages, set(), home) == ["how-to/orphan.md"]
    assert docs_hooks.unreachable_pages(pages, {"how-to/orphan.md"}, home) == []


def test_every_public_name_has_its_entry_in_the_built_api_reference(site: Path) -> None:
    html = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    names = docs_hooks.public_names()
    for expected in (
        "durable_core.DurableClient",
        "durable_sqlite.SQLiteStore",
        "durable_postgres.PostgresStore",
        "durable_postgres.EmbeddedPostgres",
        "durable_mysql.MySQLStore",
        "durable_core.testing.WorkflowRunner",
        "durable_core.testing.MemoryStore",
        "durable_core.contract.StoreContract",
        "durable_core.caller.sync.SyncClient",
    ):
        assert expected in names
    assert docs_hooks.missing_api_entries(html) == []
    # The check finds an entry that is not there.
    missing = html.replace('id="durable_sqlite.SQLiteStore"', 'id="elsewhere"')
    assert docs_hooks.missing_api_entries(missing) == ["durable_sqlite.SQLiteStore"]


def test_the_how_it_works_diagrams_are_rendered_by_the_site_itself(site: Path) -> None:
    html = (site / "explanation" / "how-it-works" / "index.html").read_text(encoding="utf-8")
    diagrams = re.findall(r'<pre class="mermaid"><code>(.*?)</code></pre>', html, flags=re.S)
    assert [d.split(None, 1)[0] for d in diagrams] == ["sequenceDiagram", "stateDiagram-v2"]
    assert "javascripts/mermaid.min.js" in html  # served by the site, not fetched from a CDN
    assert (site / "javascripts" / "mermaid.min.js").stat().st_size > 1_000_000


def test_the_first_tutorial_links_its_terms_to_the_glossary() -> None:
    text = (DOCS / "tutorials" / "first-workflow.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(\.\./reference/glossary\.md#([\w-]+)\)", text))
    glossary = (DOCS / "reference" / "glossary.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r"\{#([\w-]+)\}", glossary))
    assert linked <= anchors
    for term in ("workflow", "step", "attempt", "replay", "worker", "group-commit",
                 "running-step-row", "patch-marker", "determinism-error", "store"):  # fmt: skip
        assert term in linked, f"the first tutorial does not link {term!r} to the glossary"


def test_the_diagrams_render_in_a_browser(site: Path) -> None:
    """Mermaid parses each diagram (the strict build cannot): Chromium renders the page, and
    every ``<pre class="mermaid">`` has become a drawn ``<div class="mermaid">``."""
    page = site / "explanation" / "how-it-works" / "index.html"
    done = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Parse error" not in done.stderr and "Syntax error" not in done.stdout
    assert done.stdout.count('<div class="mermaid">') == 2
    assert '<pre class="mermaid">' not in done.stdout
