"""``ErasureContract``: what a store with the :class:`~durable_core.seams.store.Erasure`
capability must do (``durable erase``). A store that has it adds the class to its
contract test class::

    class TestMyStore(StoreContract, NoClaimerContract, ErasureContract):
        pass
"""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from ..codec.failures import dump_error
from ..errors import InvalidStateError, WorkflowNotFoundError
from ..seams.records import Settlement, StepStatus, WorkflowStatus
from ..seams.store import Erasure, Store
from .support import new_workflow
from .talk_contract import held

SECRET = "Grace Hopper"


def erasure(store: Store) -> Erasure:
    """``store`` as an :class:`Erasure` store, or a failure naming what it lacks."""
    if not isinstance(store, Erasure):
        pytest.fail(
            f"{type(store).__name__} cannot erase (erase_workflow): build it on "
            "durable_core.sql.SQLStore, or leave ErasureContract out",
            pytrace=False,
        )
    return store


class ErasureContract:
    """Tests of the :class:`~durable_core.seams.store.Erasure` capability."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    async def test_a_settled_workflows_payloads_become_tombstones_and_its_history_stays(
        self, durable_store: Store
    ) -> None:
        e = erasure(durable_store)
        claimed = await held(durable_store, input=json.dumps({"args": [SECRET], "kwargs": {}}))
        lease = claimed.lease
        await durable_store.start_step(lease, 0, "greet", json.dumps({"args": [SECRET]}))
        await durable_store.complete_step(lease, 0, json.dumps(f"Dear {SECRET}"))
        await durable_store.start_step(lease, 1, "check", "[]")
        error = dump_error({"type": "builtins.LookupError", "message": f"no {SECRET}"})
        await durable_store.fail_step(lease, 1, error)
        await durable_store.send(claimed.id, "t", json.dumps(SECRET), "m-1")
        await durable_store.settle(Settlement(lease, WorkflowStatus.FAILED, error=error))

        assert await e.erase_workflow(claimed.id) >= 5
        record = await durable_store.get_workflow(claimed.id)
        assert record is not None and record.status is WorkflowStatus.FAILED
        assert record.input.startswith("@erased:") and SECRET not in (record.error or "")
        assert json.loads(record.error or "{}")["type"] == "builtins.LookupError"
        steps = await durable_store.load_steps(claimed.id)
        assert [(s.step_index, s.step_name, s.status) for s in steps] == [
            (0, "greet", StepStatus.SUCCEEDED),
            (1, "check", StepStatus.FAILED),
        ]
        for step in steps:
            for text in (step.input, step.output, step.error):
                assert text is None or SECRET not in text
        assert steps[0].output is not None and steps[0].output.startswith("@erased:")

    async def test_an_unsettled_or_missing_workflow_is_not_erased(
        self, durable_store: Store
    ) -> None:
        e = erasure(durable_store)
        row = new_workflow(input=json.dumps({"args": [SECRET], "kwargs": {}}))
        await durable_store.enqueue([row])
        with pytest.raises(InvalidStateError):
            await e.erase_workflow(row.id)
        record = await durable_store.get_workflow(row.id)
        assert record is not None and SECRET in record.input
        with pytest.raises(WorkflowNotFoundError):
            await e.erase_workflow("durable-contract-no-such-workflow")
