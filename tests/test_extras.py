"""Installing one backend's extra: the others' URLs name what to install, and nothing else breaks.

Each test builds a fresh virtual environment holding exactly what
``pip install 'durable-core[EXTRA]'`` installs: the distributions of that
requirement's closure are linked in from this test run's environment (no
network), with durable-core itself as installed here. Then it runs Python in it.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import textwrap
import venv
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(requirement: str) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions ``requirement`` pulls in, by canonical name."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(Requirement(requirement), "")]
    while todo:
        req, extra = todo.pop()
        environment = {key: str(value) for key, value in default_environment().items()}
        environment["extra"] = extra
        if req.marker is not None and not req.marker.evaluate(environment):
            continue
        name = canonicalize_name(req.name)
        dist = importlib.metadata.distribution(name)
        wanted = ["", *sorted(req.extras)]
        for want in wanted:
            key = f"{name}[{want}]"
            if key in found:
                continue
            found[key] = dist
            todo.extend((Requirement(r), want) for r in dist.requires or [])
    return {key.split("[")[0]: dist for key, dist in found.items()}


def make_venv(path: Path, requirement: str) -> Path:
    """A venv with exactly ``requirement``'s closure; returns its python."""
    venv.create(path, with_pip=False)
    python = path / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    for dist in closure(requirement).values():
        root = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source, target = root / top, site / top
            if source.exists() and not target.exists():
                target.symlink_to(source)
    return python


def run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DURABLE_"))}
    return subprocess.run(
        [str(python), "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def postgres_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("pg-only") / "venv", "durable-core[postgres]")


@pytest.fixture(scope="module")
def sqlite_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("sqlite-only") / "venv", "durable-core[sqlite]")


def test_the_venvs_hold_exactly_their_extra(postgres_only: Path, sqlite_only: Path) -> None:
    probe = """
    import importlib.util
    print(*(bool(importlib.util.find_spec(m)) for m in ("asyncpg", "aiosqlite", "aiomysql")))
    """
    assert run(postgres_only, probe, Path.cwd()).stdout.split() == ["True", "False", "False"]
    assert run(sqlite_only, probe, Path.cwd()).stdout.split() == ["False", "True", "False"]


def test_with_only_postgres_a_sqlite_url_names_the_extra(
    postgres_only: Path, tmp_path: Path
) -> None:
    done = run(
        postgres_only,
        f"""
        import asyncio
        from durable_core import ConfigurationError, open_store
        try:
            asyncio.run(open_store("sqlite:///{tmp_path / "x.db"}"))
        except ConfigurationError as exc:
            print("ConfigurationError:", exc)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "ConfigurationError: SQLite needs the aiosqlite driver, which is not installed: "
        "pip install 'durable-core[sqlite]'"
    )
    assert done.stderr == ""


def test_with_only_postgres_the_cli_says_so_in_one_line(
    postgres_only: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(postgres_only), "-m", "durable_core", "list", "--database-url", "sqlite:///x.db"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "durable: error: SQLite needs the aiosqlite driver, which is not installed: "
        "pip install 'durable-core[sqlite]'"
    ]


def test_without_the_dashboard_extra_the_command_names_it(
    postgres_only: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(postgres_only), "-m", "durable_core", "dashboard", "--database-url", "sqlite:///x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "durable: error: the dashboard needs starlette, uvicorn, jinja2: "
        "pip install 'durable-core[dashboard]'"
    ]


def test_without_the_crypto_extra_encryption_keys_name_it(
    postgres_only: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(postgres_only), "-m", "durable_core", "list", "--database-url", "sqlite:///x.db"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "DURABLE_ENCRYPTION_KEYS": "A=" + "A" * 43 + "="},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "durable: error: the encrypting codec needs cryptography, which is not installed: "
        "pip install 'durable-core[crypto]'"
    ]


def test_with_only_sqlite_nothing_is_logged_and_postgres_names_its_extra(
    sqlite_only: Path, tmp_path: Path
) -> None:
    done = run(
        sqlite_only,
        f"""
        import asyncio, logging
        logging.basicConfig(level=logging.WARNING)
        from durable_core import ConfigurationError, open_store
        from durable_core.caller.backends import url_forms
        print(url_forms())
        store = asyncio.run(open_store("sqlite:///{tmp_path / "x.db"}"))
        asyncio.run(store.close())
        try:
            asyncio.run(open_store("postgresql://u@localhost/db"))
        except ConfigurationError as exc:
            print("ConfigurationError:", exc)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "no plugin failure is logged for a backend that is not installed"
    forms, error = done.stdout.strip().splitlines()
    # A backend whose driver is missing is left out of the URL forms, and named only
    # when a URL asks for it.
    assert "sqlite:///relative/path.db" in forms and "postgresql" not in forms
    assert error == (
        "ConfigurationError: PostgreSQL needs the asyncpg driver, which is not installed: "
        "pip install 'durable-core[postgres]'"
    )


def test_without_the_otel_extra_durable_core_otel_names_it(
    sqlite_only: Path, tmp_path: Path
) -> None:
    done = run(
        sqlite_only,
        """
        import durable_core
        from durable_core import ConfigurationError
        try:
            import durable_core.observers.otel
        except ConfigurationError as exc:
            print("ConfigurationError:", exc)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "ConfigurationError: durable_core.observers.otel needs OpenTelemetry, which is not "
        "installed (opentelemetry): pip install 'durable-core[otel]'"
    )
