"""Counting real executions: step bodies record each run in a side SQLite file."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_EFFECTS: list[Path] = []


def effect(tag: str) -> None:
    """Record one execution of something, durably, in the side-effects file."""
    conn = sqlite3.connect(_EFFECTS[0], timeout=5, isolation_level=None)
    try:
        conn.execute("INSERT INTO side_effects (tag) VALUES (?)", (tag,))
    finally:
        conn.close()


def effect_count(tag: str) -> int:
    """How many times ``tag`` was recorded."""
    conn = sqlite3.connect(_EFFECTS[0], timeout=5)
    try:
        return int(
            conn.execute("SELECT count(*) FROM side_effects WHERE tag = ?", (tag,)).fetchone()[0]
        )
    finally:
        conn.close()


@pytest.fixture
def effects(tmp_path: Path) -> Iterator[Callable[[str], int]]:
    """A fresh side-effects file for this test; yields :func:`effect_count`."""
    path = tmp_path / "effects.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE side_effects (id INTEGER PRIMARY KEY, tag TEXT NOT NULL)")
    conn.commit()
    conn.close()
    _EFFECTS[:] = [path]
    yield effect_count
    _EFFECTS.clear()
