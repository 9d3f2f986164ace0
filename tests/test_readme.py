"""Every ```python block of README.md and of every docs page (docs/**/*.md) runs as written.

The pages are found by globbing, so a page added under docs/ is tested with no
change here. Each block's test id is its page and its number there
(``docs/how-to/waiting.md:3``, and the file it names: ``README.md:2-test_reminder.py``).

Each block runs in a fresh interpreter, in an empty temporary directory, with
the repository root on ``PYTHONPATH`` and no ``DURABLE_*``/``WORKFLOW_*``
variable set, so it must be complete: its own imports, workflows and store.

- A block whose first line is a comment naming a Python file
  (``# my_store/store.py``) is that file. Every such block of a page is
  written into the directory of every block of that page, so one block may
  import another (the contract suite's block imports ``my_store.store``).
- A block naming a ``test_*.py`` file is a pytest module: it runs under
  pytest, with the arguments of a ``<!-- pytest-args: ... -->`` comment on the
  line before the block, if there is one.
- A block that calls ``open_store()`` with no URL reads ``DURABLE_DATABASE_URL``:
  it gets a fresh PostgreSQL database beside the test database
  (``DURABLE_TEST_POSTGRES_URL``), dropped afterwards. So does a test module
  using the pytest plugin's PostgreSQL fixtures, as ``DURABLE_POSTGRES_URL``.
- A ``<!-- not-run: reason -->`` comment on the line before a block excludes
  it; it shows as skipped, with its reason. Keep these rare: a fragment that
  is not Python (a pyproject entry) takes another language tag instead.
- A page with a ``<!-- run-shell -->`` comment before a ```` ```bash ```` block is
  a tutorial run end to end, as one test: its shell blocks so marked run in
  order, with ``bash -e``, in one folder holding the page's file blocks, with
  ``DURABLE_DATABASE_URL`` naming a fresh PostgreSQL database and this
  checkout's ``durable`` and ``python`` first on ``PATH``; a block marked
  ``<!-- run-shell: background -->`` (one command: a worker) runs beside the
  blocks after it and must exit 0 on the SIGTERM that stops it when they are
  done. Its Python blocks run there, as its shell blocks run them, not one by one.

The blocks run in parallel, each with a hang guard of ten minutes, so a block
that hangs fails instead of stopping the suite; the guard bounds a hang, not a
block's speed (a block takes seconds, many times that on a loaded machine).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, drop_postgres_database, fresh_postgres_database

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
TIMEOUT_SECONDS = 600

FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
DIRECTIVE = re.compile(r"^<!--\s*(not-run|pytest-args|run-shell)(?::(.*?))?\s*-->\s*$")
FILE_HEADER = re.compile(r"^#\s*([\w./-]+\.py)\s*$")
UNSCOPED_ENV = ("DURABLE_", "WORKFLOW_", "PYTEST_")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    """The page's path from the repository root (``docs/how-to/waiting.md``)."""
    number: int
    """Its place among the page's blocks of its language (1-based)."""
    line: int
    """The line of its opening fence (1-based)."""
    language: str
    code: str
    directive: tuple[str, str] | None = None
    """``(name, value)`` of the HTML comment on the line before it."""

    @property
    def path(self) -> str | None:
        """The file the block says it is, from a ``# path.py`` first line."""
        first = self.code.split("\n", 1)[0]
        match = FILE_HEADER.match(first)
        return match.group(1) if match else None

    @property
    def not_run(self) -> str | None:
        return self.directive[1] if self.directive and self.directive[0] == "not-run" else None

    @property
    def pytest_args(self) -> list[str]:
        if self.directive and self.directive[0] == "pytest-args":
            return shlex.split(self.directive[1])
        return []

    @property
    def is_pytest_module(self) -> bool:
        return self.path is not None and Path(self.path).name.startswith("test_")

    @property
    def needs_database_url(self) -> bool:
        return "open_store()" in self.code or "durable_postgres_store" in self.code

    @property
    def test_id(self) -> str:
        return f"{self.page}:{self.number}" + (f"-{self.path}" if self.path else "")

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse(text: str, page: str = "README.md") -> list[Block]:
    """The fenced code blocks of ``text`` (the page ``page``), with the directive before each."""
    lines = text.split("\n")
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        start = index
        index += 1
        while index < len(lines) and not lines[index].startswith("```"):
            index += 1
        if index == len(lines):
            raise AssertionError(f"{page}:{start + 1}: a code block is never closed")
        previous = DIRECTIVE.match(lines[start - 1]) if start else None
        directive = (previous.group(1), (previous.group(2) or "").strip()) if previous else None
        code = "\n".join(lines[start + 1 : index]) + "\n"
        language = opening.group(1).lower()
        number = 1 + sum(block.language == language for block in blocks)
        blocks.append(Block(page, number, start + 1, language, code, directive))
        index += 1
    return blocks


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


BLOCKS = [block for page in PAGES for block in parse(page.read_text("utf-8"), _name(page))]
PYTHON = [block for block in BLOCKS if block.language == "python"]
SHELL = [block for block in BLOCKS if block.directive and block.directive[0] == "run-shell"]
SESSION_PAGES = sorted({block.page for block in SHELL})
"""The tutorials run end to end (``<!-- run-shell -->``): their Python blocks run there."""
ALONE = [block for block in PYTHON if block.page not in SESSION_PAGES]


def _param(block: Block) -> object:
    marks = [pytest.mark.skip(reason=f"not-run: {block.not_run}")] if block.not_run else []
    return pytest.param(block, id=block.test_id, marks=marks)


def _environment(database_url: str | None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(UNSCOPED_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if database_url is not None:
        env["DURABLE_DATABASE_URL"] = env["DURABLE_POSTGRES_URL"] = database_url
    return env


def _write_files(directory: Path, page: str) -> None:
    """Write the blocks of ``page`` that name a file into ``directory``."""
    for block in PYTHON:
        if block.page == page and block.path is not None:
            target = directory / block.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")


def run_block(block: Block, directory: Path) -> subprocess.CompletedProcess[str]:
    """Run ``block`` as written in ``directory``, a fresh empty folder."""
    _write_files(directory, block.page)
    script = block.path or f"block_line_{block.line}.py"
    target = directory / script
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block.code, encoding="utf-8")
    command = [sys.executable, script]
    if block.is_pytest_module:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script]
        command += block.pytest_args
    database_url = None
    if block.needs_database_url:
        name = POSTGRES_URL.rsplit("/", 1)[1].split("?")[0]
        ordinal = PYTHON.index(block)
        database_url = asyncio.run(fresh_postgres_database(POSTGRES_URL, f"{name}_docs_{ordinal}"))
    try:
        return subprocess.run(
            command,
            cwd=directory,
            env=_environment(database_url),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(
            command,
            -1,
            _text(exc.stdout),
            _text(exc.stderr) + f"\n(timed out after {TIMEOUT_SECONDS}s)",
        )
    finally:
        if database_url is not None:
            asyncio.run(drop_postgres_database(database_url))


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Start every selected block at once (a process each); each test waits for its own."""
    selected: set[str] = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        block = callspec.params.get("block") if callspec is not None else None
        if isinstance(block, Block):
            selected.add(block.test_id)
    wanted = [block for block in ALONE if block.test_id in selected and not block.not_run]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        yield {
            block.test_id: pool.submit(run_block, block, tmp_path_factory.mktemp("block"))
            for block in wanted
        }


@pytest.mark.parametrize("block", [_param(block) for block in ALONE])
def test_python_block_runs_as_written(
    block: Block,
    runs: dict[str, Future[subprocess.CompletedProcess[str]]],
    tmp_path: Path,
) -> None:
    future = runs.get(block.test_id)
    result = future.result() if future is not None else run_block(block, tmp_path)
    assert result.returncode == 0, (
        f"{block.where}: the block exited with {result.returncode}\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    )


def test_the_pages_and_their_blocks_are_found() -> None:
    pages = {block.page for block in PYTHON}
    assert "README.md" in pages, "README.md has lost its examples, or the parser its way"
    assert len(pages) >= 10, f"docs pages with python blocks: {sorted(pages)}"
    assert len(PYTHON) >= 30, "the docs have lost their examples, or the parser its way"


@pytest.mark.parametrize("page", [_name(page) for page in PAGES])
def test_each_directive_stands_before_a_python_block_it_applies_to(page: str) -> None:
    blocks = [block for block in [*PYTHON, *SHELL] if block.page == page]
    by_line = {block.line - 1: block for block in blocks if block.directive}
    lines = (ROOT / page).read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, start=1):
        if DIRECTIVE.match(line):
            assert number in by_line, f"{page}:{number}: no block this directive applies to"
    for block in by_line.values():
        if block.not_run is not None:
            assert block.not_run, f"{block.where}: not-run needs a reason"
        if block.pytest_args:
            assert block.is_pytest_module, f"{block.where}: pytest-args on a non-test"
        if block.directive and block.directive[0] == "run-shell":
            assert block.language == "bash", f"{block.where}: run-shell on a non-bash block"
            assert block.directive[1] in ("", "background"), f"{block.where}: run-shell what?"


@pytest.mark.parametrize("page", SESSION_PAGES)
def test_a_tutorial_runs_end_to_end_as_written(page: str, tmp_path: Path) -> None:
    """The page's marked shell blocks, in order, on a fresh database (see the module doc)."""
    _write_files(tmp_path, page)
    name = POSTGRES_URL.rsplit("/", 1)[1].split("?")[0]
    database_url = asyncio.run(fresh_postgres_database(POSTGRES_URL, f"{name}_session"))
    env = _environment(database_url)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    background: list[tuple[Block, subprocess.Popen[str]]] = []
    try:
        for block in (block for block in SHELL if block.page == page):
            if block.directive == ("run-shell", "background"):
                [command] = [line for line in block.code.splitlines() if line.strip()]
                process = subprocess.Popen(
                    ["bash", "-c", f"exec {command}"],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                background.append((block, process))
                continue
            done = subprocess.run(
                ["bash", "-e", "-c", block.code],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_SECONDS,
            )
            assert done.returncode == 0, (
                f"{block.where}: exited with {done.returncode}\n"
                f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
            )
    finally:
        outcomes = []
        for block, process in background:
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=TIMEOUT_SECONDS)
            outcomes.append((block, process.returncode, output))
        asyncio.run(drop_postgres_database(database_url))
    for block, code, output in outcomes:
        assert code == 0, f"{block.where}: exited with {code} on SIGTERM\n{output[-4000:]}"


@pytest.mark.parametrize("page", sorted({block.page for block in PYTHON}))
def test_python_blocks_pass_the_linter(page: str, tmp_path: Path) -> None:
    """The repository's ruff rules hold in a page's code, seen as the code of a user's project:
    durable_core is a third-party package there, and the page's own files first-party.
    (``make lint`` checks the blocks' format: ruff formats Markdown's Python blocks.)"""
    _write_files(tmp_path, page)
    ruff = [sys.executable, "-m", "ruff", "check", "--no-cache"]
    ruff += ["--config", str(ROOT / "pyproject.toml"), "--config", f"src = [{str(tmp_path)!r}]"]
    failures = []
    for block in (block for block in PYTHON if block.page == page):
        name = block.path or f"block_line_{block.line}.py"
        result = subprocess.run(
            [*ruff, "--stdin-filename", name, "-"],
            input=block.code,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            failures.append(f"{block.where}:\n{result.stdout}{result.stderr}")
    assert not failures, "\n".join(failures)


def _slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_links_within_the_readme_lead_to_headings() -> None:
    text = README.read_text(encoding="utf-8")
    outside_code = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    slugs: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", outside_code, flags=re.M):
        slug = _slug(heading)
        count = 0
        while (slug if not count else f"{slug}-{count}") in slugs:
            count += 1
        slugs.add(slug if not count else f"{slug}-{count}")
    anchors = set(re.findall(r"\]\(#([^)\s]+)\)", outside_code))
    assert anchors, "no internal links found: the pattern is wrong"
    assert not anchors - slugs, f"links to no heading: {sorted(anchors - slugs)}"


def test_the_readme_links_to_files_that_exist() -> None:
    """README's links into the repository (the docs pages, CONTRIBUTING.md) lead somewhere;
    the docs' own links are checked by ``mkdocs build --strict`` (``make docs``)."""
    text = README.read_text(encoding="utf-8")
    outside_code = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    targets = re.findall(r"\]\(([^)#\s:]+)(?:#[^)\s]*)?\)", outside_code)
    assert targets, "no links to files found: the pattern is wrong"
    missing = sorted({target for target in targets if not (ROOT / target).exists()})
    assert not missing, f"README.md links to files that do not exist: {missing}"
