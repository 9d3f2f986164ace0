"""The layout: packages by role, and what moved still found under its old name."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings
from pathlib import Path

import pytest

import durable_core
from durable_core import WorkflowStatus
from durable_core._moved import MOVED, current_name
from durable_core.codec import decode
from durable_core.codec.failures import recorded_exception
from durable_core.errors import NonRetryableError

ROOT = Path(durable_core.__file__).parent
TOP_MODULES = {"__init__", "__main__", "_moved", "durations", "errors", "pytest_plugin"}
TOP_MODULES |= {"outages", "redaction", "testing"}


def test_the_top_level_holds_packages_and_the_public_modules_only() -> None:
    modules = {p.stem for p in ROOT.glob("*.py")}
    assert modules == TOP_MODULES
    for package in pkgutil.iter_modules([str(ROOT)]):
        if package.ispkg:
            module = importlib.import_module(f"durable_core.{package.name}")
            assert module.__doc__ and len(module.__doc__) > 40, f"{package.name} says what it is"


def test_an_old_module_path_imports_the_module_it_moved_to_with_a_warning() -> None:
    sys.modules.pop("durable_core.records", None)
    with pytest.warns(DeprecationWarning, match=r"durable_core\.records moved to"):
        old = importlib.import_module("durable_core.records")
    assert old is importlib.import_module("durable_core.seams.records")
    assert old.WorkflowStatus is WorkflowStatus
    for before, after in MOVED.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert importlib.import_module(before) is importlib.import_module(after)


def test_a_value_stored_under_an_old_module_name_reads_back() -> None:
    stored = '{"__durable__":"enum","type":"durable_core.records:WorkflowStatus","value":"failed"}'
    assert decode(stored) is WorkflowStatus.FAILED


def test_an_error_recorded_under_its_old_module_raises_as_its_own_type() -> None:
    assert current_name("durable_core.retry.NonRetryableError") == (
        "durable_core.errors.NonRetryableError"
    )
    error = {"type": "durable_core.retry.NonRetryableError", "message": "card declined"}
    exc = recorded_exception("wf-1", WorkflowStatus.FAILED, error)
    assert isinstance(exc, NonRetryableError)
