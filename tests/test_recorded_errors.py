"""A failed workflow's error crosses to whoever reads it with its own type, in-process on
SQLite and PostgreSQL; a cancelled one records and raises a cancellation of its own."""

from __future__ import annotations

import sys
import types
from typing import Any

import anyio
import pytest

from durable_core import (
    DurableClient,
    WorkflowCancelledError,
    WorkflowConfig,
    WorkflowFailedError,
    WorkflowStatus,
    WorkflowTimeoutError,
    start_workflow,
    workflow,
    workflow_step,
)
from durable_core.codec.failures import dump_error, error_record, recorded_exception
from durable_core.contract.support import new_workflow
from durable_core.seams.records import Settlement
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner

pytestmark = pytest.mark.anyio

CANCELLED_TYPE = "durable_core.errors.WorkflowCancelledError"


class CardDeclined(Exception):
    """A user-defined error, raised by a step."""


class NeedsKeywords(Exception):
    """An error whose constructor cannot be called with a message alone."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"refused with code {code}")
        self.code = code


@workflow_step
async def charge_card(cents: int) -> str:
    if cents > 100_000:
        raise CardDeclined(f"card declined: {cents} is over the limit")
    return f"charged {cents}"


@workflow(max_attempts=1)
async def charge(cents: int) -> str:
    return await charge_card(cents)


@workflow_step
async def raise_builtin(kind: str) -> None:
    errors: dict[str, Exception] = {
        "ConnectionError": ConnectionError("gateway down"),
        "KeyError": KeyError("no such invoice"),
        "ValueError": ValueError("bad amount"),
        "NeedsKeywords": NeedsKeywords(code=7),
    }
    raise errors[kind]


@workflow(max_attempts=1)
async def fails_with(kind: str) -> None:
    await raise_builtin(kind)


@workflow(max_attempts=3)
async def flaky_gateway() -> None:
    await raise_builtin("ConnectionError")


@workflow_step
async def slow() -> None:
    await anyio.sleep(10)


@workflow(timeout=0.3)
async def runs_too_long() -> None:
    await slow()


@workflow
async def pays_with_a_child(cents: int) -> str:
    payment = await start_workflow(charge, cents)
    try:
        return await payment.output()
    except CardDeclined as exc:
        assert isinstance(exc, WorkflowFailedError)
        return f"not paid ({exc.error['message']})"


@workflow
async def waits_for_a_flaky_child() -> str:
    child = await start_workflow(flaky_gateway)
    try:
        await child.output()
    except WorkflowCancelledError as exc:
        return f"child cancelled ({exc.error['type']})"
    except WorkflowFailedError as exc:
        return f"child failed ({exc.error['type']})"
    return "child succeeded"


def runner(store: Store) -> WorkflowRunner:
    return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=60))


async def failed_by_hand(store: Store, error: dict[str, Any]) -> str:
    """A failed workflow whose recorded error is ``error``, written through the store."""
    row = new_workflow()
    await store.enqueue([row])
    claimed = await store.acquire(row.id, worker_id="by-hand", lease_seconds=30)
    assert claimed is not None
    await store.settle(Settlement(claimed.lease, WorkflowStatus.FAILED, error=dump_error(error)))
    return row.id


# -- cancelling records a cancellation ---------------------------------------------------


async def test_a_workflow_cancelled_after_a_failed_attempt_reports_its_cancellation(
    sqlite_or_postgres: Store,
) -> None:
    client = DurableClient(sqlite_or_postgres)
    handle = await client.start_workflow(flaky_gateway)
    assert await runner(sqlite_or_postgres).run_once(handle) is WorkflowStatus.PENDING
    await client.cancel(handle.id)
    error = await handle.error()
    assert error is not None
    assert (error["type"], error["message"]) == (
        CANCELLED_TYPE,
        f"workflow {handle.id} was cancelled",
    )
    for read in (handle.output, handle.output_raw):
        with pytest.raises(WorkflowCancelledError) as caught:
            await read()
        assert not isinstance(caught.value, ConnectionError)
        assert str(caught.value) == f"workflow {handle.id} was cancelled"
        assert caught.value.error == error
    [attempt] = await handle.attempts()
    assert attempt.outcome == "retry" and attempt.error is not None
    assert "gateway down" in attempt.error


async def test_a_parent_tells_a_cancelled_child_from_a_failed_one(
    sqlite_or_postgres: Store,
) -> None:
    client, run = DurableClient(sqlite_or_postgres), runner(sqlite_or_postgres)
    parent = await client.start_workflow(waits_for_a_flaky_child)
    assert await run.run_once(parent) is WorkflowStatus.WAITING
    [child] = [
        r for r in await sqlite_or_postgres.list_workflows(limit=50) if r.parent_id == parent.id
    ]
    assert await run.run_once(child.id) is WorkflowStatus.PENDING  # "gateway down", to retry
    await client.cancel(child.id)
    assert await run.run_until_complete(parent) is WorkflowStatus.SUCCEEDED
    assert await parent.output() == f"child cancelled ({CANCELLED_TYPE})"


# -- a failed workflow raises its own error's type --------------------------------------


async def test_a_user_defined_error_crosses_to_the_reader(sqlite_or_postgres: Store) -> None:
    handle = await DurableClient(sqlite_or_postgres).start_workflow(charge, 250_000)
    assert await runner(sqlite_or_postgres).run_once(handle) is WorkflowStatus.FAILED
    for read in (handle.output, handle.output_raw):
        with pytest.raises(CardDeclined) as caught:
            await read()
        exc = caught.value
        assert isinstance(exc, WorkflowFailedError)
        assert str(exc) == f"workflow {handle.id} failed: card declined: 250000 is over the limit"
        assert exc.error == await handle.error()
        assert exc.error["type"] == f"{__name__}.CardDeclined"
        [note] = exc.__notes__
        assert "charge_card" in note and "CardDeclined: card declined" in note
    with pytest.raises(WorkflowFailedError, match="over the limit"):
        await handle.output()


async def test_a_parent_catches_its_childs_error_by_type(sqlite_or_postgres: Store) -> None:
    client, run = DurableClient(sqlite_or_postgres), runner(sqlite_or_postgres)
    declined = await client.start_workflow(pays_with_a_child, 250_000)
    paid = await client.start_workflow(pays_with_a_child, 2_500)
    assert await run.run_until_complete(declined) is WorkflowStatus.SUCCEEDED
    assert await run.run_until_complete(paid) is WorkflowStatus.SUCCEEDED
    assert await declined.output() == "not paid (card declined: 250000 is over the limit)"
    assert await paid.output() == "charged 2500"


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (ConnectionError, "gateway down"),
        (KeyError, "'no such invoice'"),
        (ValueError, "bad amount"),
    ],
)
async def test_builtin_errors_cross_with_their_type(
    sqlite_or_postgres: Store, kind: type[Exception], message: str
) -> None:
    handle = await DurableClient(sqlite_or_postgres).start_workflow(fails_with, kind.__name__)
    assert await runner(sqlite_or_postgres).run_once(handle) is WorkflowStatus.FAILED
    with pytest.raises(kind) as caught:
        await handle.output()
    assert isinstance(caught.value, WorkflowFailedError)
    assert str(caught.value) == f"workflow {handle.id} failed: {message}"
    assert caught.value.args == (str(caught.value),)
    assert caught.value.error["type"] == f"builtins.{kind.__name__}"


async def test_an_error_needing_keyword_arguments_still_crosses(
    sqlite_or_postgres: Store,
) -> None:
    handle = await DurableClient(sqlite_or_postgres).start_workflow(fails_with, "NeedsKeywords")
    assert await runner(sqlite_or_postgres).run_once(handle) is WorkflowStatus.FAILED
    with pytest.raises(NeedsKeywords) as caught:
        await handle.output()
    exc = caught.value
    assert isinstance(exc, WorkflowFailedError)
    assert str(exc) == f"workflow {handle.id} failed: refused with code 7"
    assert repr(exc) == f"NeedsKeywords('workflow {handle.id} failed: refused with code 7')"
    assert exc.error["message"] == "refused with code 7"


async def test_a_type_from_a_module_not_imported_is_not_imported(
    sqlite_or_postgres: Store,
) -> None:
    assert "some_unimported_module" not in sys.modules
    record = {"type": "some_unimported_module.Boom", "message": "boom", "traceback": "Tb: boom"}
    workflow_id = await failed_by_hand(sqlite_or_postgres, record)
    with pytest.raises(WorkflowFailedError) as caught:
        await DurableClient(sqlite_or_postgres).handle(workflow_id).output()
    assert type(caught.value) is WorkflowFailedError
    assert str(caught.value) == f"workflow {workflow_id} failed: boom"
    assert caught.value.error == record
    assert caught.value.__notes__ == [f"Traceback recorded by workflow {workflow_id}:\nTb: boom"]
    assert "some_unimported_module" not in sys.modules


async def test_a_timed_out_workflow_raises_workflow_timeout_error(
    sqlite_or_postgres: Store,
) -> None:
    handle = await DurableClient(sqlite_or_postgres).start_workflow(runs_too_long)
    assert await runner(sqlite_or_postgres).run_once(handle) is WorkflowStatus.CANCELLED
    with pytest.raises(WorkflowTimeoutError) as caught:
        await handle.output()
    exc = caught.value
    assert isinstance(exc, WorkflowCancelledError) and isinstance(exc, TimeoutError)
    assert exc.retryable is False
    assert exc.error == await handle.error()
    assert str(exc) == exc.error["message"] and "timed out" in str(exc)


# -- recorded_exception, with no store --------------------------------------------------


def raised(exc: Exception) -> dict[str, Any]:
    try:
        raise exc
    except Exception as caught:
        return error_record(caught)


def test_only_exception_classes_already_imported_are_used() -> None:
    lazy = types.ModuleType("lazily_loading_module")
    asked: list[str] = []

    def module_getattr(name: str) -> Any:
        asked.append(name)
        return CardDeclined

    lazy.__getattr__ = module_getattr  # type: ignore[method-assign]
    sys.modules[lazy.__name__] = lazy
    try:
        names = [
            "lazily_loading_module.Boom",  # only its __getattr__ would find one
            "builtins.print",  # not a class
            "builtins.KeyboardInterrupt",  # not an Exception
            "os.path",  # a module
            f"{__name__}.raised.<locals>.Local",
            f"{__name__}.CardDeclined.nothing",
            "",
            None,
        ]
        for name in names:
            exc = recorded_exception("w", WorkflowStatus.FAILED, {"type": name, "message": "m"})
            assert type(exc) is WorkflowFailedError, name
            assert str(exc) == "workflow w failed: m"
        assert asked == []
    finally:
        del sys.modules[lazy.__name__]


def test_a_crossed_error_is_recorded_again_as_its_own_type() -> None:
    first = recorded_exception("child", WorkflowStatus.FAILED, raised(CardDeclined("declined")))
    again = raised(first)  # a parent that lets its child's error escape
    assert again["type"] == f"{__name__}.CardDeclined"
    assert again["message"] == "workflow child failed: declined"
    grandparent = recorded_exception("parent", WorkflowStatus.FAILED, again)
    assert isinstance(grandparent, CardDeclined) and isinstance(grandparent, WorkflowFailedError)
    assert type(grandparent) is type(first), "one class per recorded type"


def test_a_failed_workflow_that_recorded_a_cancellation_is_a_failure() -> None:
    record = raised(WorkflowCancelledError("workflow child was cancelled"))
    failed = recorded_exception("parent", WorkflowStatus.FAILED, record)
    assert type(failed) is WorkflowFailedError
    cancelled = recorded_exception("parent", WorkflowStatus.CANCELLED, record)
    assert type(cancelled) is WorkflowCancelledError
    assert str(cancelled) == "workflow child was cancelled"
    plain = raised(WorkflowFailedError("workflow child failed: x"))
    assert type(recorded_exception("p", WorkflowStatus.FAILED, plain)) is WorkflowFailedError


def test_a_cancelled_workflow_is_a_cancellation_whatever_it_recorded() -> None:
    legacy = {"type": "builtins.ConnectionError", "message": "gateway down"}
    exc = recorded_exception("w", WorkflowStatus.CANCELLED, legacy)
    assert type(exc) is WorkflowCancelledError
    assert str(exc) == "workflow w cancelled: gateway down"
    nothing = recorded_exception("w", WorkflowStatus.CANCELLED, None)
    assert type(nothing) is WorkflowCancelledError and nothing.error == {}
    assert str(nothing) == "workflow w cancelled: no error recorded"
    assert not hasattr(nothing, "__notes__")


class Unsubclassable(Exception):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("no subclasses")


class StrictNew(Exception):
    def __new__(cls, *, code: int) -> StrictNew:
        return super().__new__(cls)


def test_types_that_cannot_be_combined_or_built_fall_back() -> None:
    for kind in (Unsubclassable, StrictNew):
        record = {"type": f"{__name__}.{kind.__qualname__}", "message": "m"}
        exc = recorded_exception("w", WorkflowStatus.FAILED, record)
        assert type(exc) is WorkflowFailedError, kind
        assert exc.error == record and str(exc) == "workflow w failed: m"
