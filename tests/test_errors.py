"""The public exception hierarchy: what each error is, and that every exported name imports."""

from __future__ import annotations

import importlib

import durable_core
from durable_core import errors


def test_every_name_in_all_is_importable() -> None:
    for module in (durable_core, errors):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], f"{module.__name__}.__all__ names what it does not define"
    namespace: dict[str, object] = {}
    exec("from durable_core import *", namespace)
    assert set(durable_core.__all__) <= set(namespace)
    assert (
        importlib.import_module("durable_core").WorkflowTimeoutError is errors.WorkflowTimeoutError
    )


def test_every_public_error_is_exported() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.FrameworkError)
    }
    assert defined <= set(errors.__all__)
    assert defined <= set(durable_core.__all__)


def test_a_cancellation_is_a_failure_and_a_timeout_is_a_cancellation() -> None:
    cancelled = errors.WorkflowCancelledError("workflow w was cancelled", {"type": "t"})
    assert isinstance(cancelled, errors.WorkflowFailedError)
    assert cancelled.error == {"type": "t"} and str(cancelled) == "workflow w was cancelled"
    timed_out = errors.WorkflowTimeoutError("workflow w timed out")
    for kind in (
        errors.WorkflowCancelledError,
        errors.WorkflowFailedError,
        errors.FrameworkError,
        TimeoutError,
    ):
        assert isinstance(timed_out, kind), kind
    assert timed_out.retryable is False and errors.WorkflowTimeoutError.retryable is False
    assert str(timed_out) == "workflow w timed out" and timed_out.error == {}
    assert timed_out.args == ("workflow w timed out",)
