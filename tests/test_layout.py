"""The layout: packages by role, the top level holding only the public modules."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import durable_core

ROOT = Path(durable_core.__file__).parent
TOP_MODULES = {"__init__", "__main__", "durations", "errors", "pytest_plugin"}
TOP_MODULES |= {"redaction", "testing"}


def test_the_top_level_holds_packages_and_the_public_modules_only() -> None:
    modules = {p.stem for p in ROOT.glob("*.py")}
    assert modules == TOP_MODULES
    for package in pkgutil.iter_modules([str(ROOT)]):
        if package.ispkg:
            module = importlib.import_module(f"durable_core.{package.name}")
            assert module.__doc__ and len(module.__doc__) > 40, f"{package.name} says what it is"


def test_a_module_path_of_the_flat_layout_before_0_1_does_not_import() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("durable_core.records")
