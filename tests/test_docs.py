"""The docs' reference pages that are written by hand say what the code does.

(The generated ones cannot drift: docs_hooks.py renders them from the code when
``make docs`` builds the site, and a stale API name fails that build.)
"""

from __future__ import annotations

import re
from pathlib import Path

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
