"""``EngineContract``: the engine's rules on a store, driven through the real executor
(:class:`~durable_core.testing.WorkflowRunner`, on its clock): replay, retries, waits.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ..caller.client import DurableClient
from ..codec import encode_arguments
from ..errors import (
    InvalidStateError,
)
from ..runtime.config import WorkflowConfig
from ..seams.records import (
    StepStatus,
    WorkflowStatus,
)
from ..seams.store import Store
from ..testing import WorkflowRunner
from . import workflows as wfs
from .base import OPERATIONS, ContractBase, require
from .support import (
    ODD_TEXTS,
    Tamper,
)


class EngineContract(ContractBase):
    """Runs workflows through the executor: the store plays every role a
    :class:`~durable_core.testing.WorkflowRunner` needs
    (:data:`~durable_core.seams.roles.RUNNER_ROLES`)."""

    async def test_a_fork_resumes_from_its_step(self, durable_store: Store, key: str) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        runner = self.runner(durable_store)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        fork = await DurableClient(durable_store).fork(handle.id, from_step=1)
        assert fork.id != handle.id
        assert await runner.run_until_complete(fork) is WorkflowStatus.SUCCEEDED
        assert await fork.output() == await handle.output()
        assert wfs.CALLS[key] == ["one", "two", "three", "two", "three"], "step 0 replayed"
        assert [s.attempts for s in await fork.steps()] == [1, 1, 1]

    async def test_workflow_runs_to_success_with_its_steps_recorded(
        self, durable_store: Store, key: str
    ) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        assert (
            await self.runner(durable_store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        )
        assert await handle.output() == [f"{key}:1", f"{key}:1:2", f"{key}:1:2:3"]
        steps = await durable_store.load_steps(handle.id)
        assert [(s.step_index, s.step_name, s.status) for s in steps] == [
            (0, wfs.step_one.name, StepStatus.SUCCEEDED),
            (1, wfs.step_two.name, StepStatus.SUCCEEDED),
            (2, wfs.step_three.name, StepStatus.SUCCEEDED),
        ]
        assert steps[0].input == encode_arguments((key,), {}, what="input")
        assert wfs.CALLS[key] == ["one", "two", "three"]
        assert (await self.record(durable_store, handle.id)).attempts == 1

    async def test_retry_replays_cached_steps_and_reruns_the_failed_one(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        steps = await durable_store.load_steps(handle.id)
        assert [s.status for s in steps] == [StepStatus.SUCCEEDED, StepStatus.FAILED]
        assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED
        assert wfs.CALLS[key] == ["one", "two", "two", "three"]
        steps = await durable_store.load_steps(handle.id)
        assert [(s.status, s.attempts) for s in steps] == [
            (StepStatus.SUCCEEDED, 1),
            (StepStatus.SUCCEEDED, 2),
            (StepStatus.SUCCEEDED, 1),
        ]
        assert (await self.record(durable_store, handle.id)).attempts == 2

    async def test_a_step_left_running_by_a_crash_reruns(
        self, durable_store: Store, key: str
    ) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        crashed = await durable_store.acquire(
            handle.id, worker_id="crashed", lease_seconds=self.short_lease
        )
        assert crashed is not None
        step_input = encode_arguments((key,), {}, what="input")
        await durable_store.start_step(crashed.lease, 0, wfs.step_one.name, step_input)
        await self.expire()
        assert await self.runner(durable_store).run_once(handle) is WorkflowStatus.SUCCEEDED
        assert wfs.CALLS[key] == ["one", "two", "three"]
        steps = await durable_store.load_steps(handle.id)
        assert (steps[0].status, steps[0].attempts) == (StepStatus.SUCCEEDED, 2)
        assert (await self.record(durable_store, handle.id)).attempts == 2

    async def test_a_replayed_step_with_a_different_input_fails_the_workflow(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.NONCE[key], wfs.FAILURES[key] = "first", 1
        handle = await DurableClient(durable_store).start_workflow(wfs.drifting, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        wfs.NONCE[key] = "second"
        assert await runner.run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and error["type"].endswith("StepInputMismatchError")
        assert wfs.CALLS[key] == ["echo", "two"]
        (cached, _failed) = await durable_store.load_steps(handle.id)
        assert cached.status is StepStatus.SUCCEEDED
        assert "first" in cached.input and "second" not in cached.input

    async def test_a_different_step_at_a_cached_index_fails_the_workflow(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.BRANCH[key], wfs.FAILURES[key] = True, 1
        handle = await DurableClient(durable_store).start_workflow(wfs.branching, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        wfs.BRANCH[key] = False
        assert await runner.run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and error["type"].endswith("StepNameMismatchError")
        assert wfs.CALLS[key] == ["a", "two"]

    async def test_the_attempt_budget_ends_in_failed(self, durable_store: Store, key: str) -> None:
        wfs.FAILURES[key] = 99
        client = DurableClient(durable_store, max_attempts=2)
        handle = await client.start_workflow(wfs.three_steps, key)
        assert await self.runner(durable_store).run_until_complete(handle) is WorkflowStatus.FAILED
        got = await self.record(durable_store, handle.id)
        assert (got.attempts, got.max_attempts) == (2, 2)
        error = await handle.error()
        assert error is not None and error["type"].endswith("PlannedFailure")
        assert error["step_index"] == 1
        assert wfs.CALLS[key] == ["one", "two", "two"]

    async def test_retry_workflow_resumes_from_the_cache(
        self, durable_store: Store, key: str
    ) -> None:
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store, max_attempts=1).start_workflow(
            wfs.three_steps, key
        )
        runner = self.runner(durable_store)
        assert await runner.run_until_complete(handle) is WorkflowStatus.FAILED
        await durable_store.retry_workflow(handle.id)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        assert wfs.CALLS[key] == ["one", "two", "two", "three"]

    async def test_a_corrupted_input_fails_the_workflow(
        self, durable_store: Store, durable_tamper: Tamper, key: str
    ) -> None:
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        await durable_tamper("workflows", "input", "{not json", workflow_id=handle.id)
        assert await self.runner(durable_store).run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and "Serialization" in error["type"]
        assert (await self.record(durable_store, handle.id)).attempts == 1
        assert wfs.CALLS[key] == []

    async def test_a_corrupted_cached_output_fails_the_workflow(
        self, durable_store: Store, durable_tamper: Tamper, key: str
    ) -> None:
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store).start_workflow(wfs.three_steps, key)
        runner = self.runner(durable_store)
        assert await runner.run_once(handle) is WorkflowStatus.PENDING
        await durable_tamper(
            "workflow_steps",
            "output",
            '{"__durable__": "nonsense"}',
            workflow_id=handle.id,
            step_index=0,
        )
        assert await runner.run_once(handle) is WorkflowStatus.FAILED
        error = await handle.error()
        assert error is not None and "Serialization" in error["type"]
        assert wfs.CALLS[key] == ["one", "two"]

    async def test_odd_values_replay_equal_and_of_the_same_type(
        self, durable_store: Store, key: str
    ) -> None:
        value = {
            "text": ODD_TEXTS["emoji"] + ODD_TEXTS["control"],
            "tuple": (1, "two", 3.5),
            "when": datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
            "nested": [[[[{"deep": ("x", None)}]]]],
            "big": 2**70,
        }
        wfs.FAILURES[key] = 1
        handle = await DurableClient(durable_store).start_workflow(wfs.echo, key, value)
        assert (
            await self.runner(durable_store).run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        )
        assert wfs.CALLS[key] == ["echo", "two", "two"]
        result = await handle.output()
        assert result == value
        assert isinstance(result, dict) and type(result["tuple"]) is tuple
        assert type(result["when"]) is datetime

    def _runner(self, store: Store) -> WorkflowRunner:
        require(store, *OPERATIONS)
        return WorkflowRunner(store, WorkflowConfig(retry_backoff_secs=0), worker_id="contract")

    # -- waits, on the runner's clock --------------------------------------------

    async def test_a_three_day_sleep_completes_at_once_on_the_runners_clock(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        handle = await DurableClient(durable_store).start_workflow(
            wfs.sleeper, key, timedelta(days=3).total_seconds()
        )
        assert await runner.run_once(handle) is WorkflowStatus.WAITING
        row = await self._row(durable_store, handle.id)
        assert row.wake_at is not None and row.wake_at - row.created_at > timedelta(days=2.9)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        # The runner's clock passed the wake time; the wall clock is three days short of it.
        assert runner.clock.now() >= row.wake_at > datetime.now(UTC) + timedelta(days=2.9)
        assert await handle.output() == f"{key}:1:2"
        assert wfs.CALLS[key] == ["one", "two"], "the step before the sleep ran once"
        assert (await self._row(durable_store, handle.id)).attempts == 1

    async def test_a_message_sent_before_recv_is_received_and_a_timeout_gives_none(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        client = DurableClient(durable_store)
        early = await client.start_workflow(wfs.receiver, key, "t", None)
        await client.send(early.id, {"n": 1}, topic="t")
        assert await runner.run_until_complete(early) is WorkflowStatus.SUCCEEDED
        assert await early.output() == {"n": 1}
        late = await client.start_workflow(wfs.receiver, key, "t", 60.0)
        assert await runner.run_once(late) is WorkflowStatus.WAITING
        runner.clock.advance(59)
        await runner.drain()
        assert await late.status() is WorkflowStatus.WAITING
        runner.clock.advance(2)
        await runner.drain()
        assert (await late.status(), await late.output()) == (WorkflowStatus.SUCCEEDED, None)

    async def test_a_workflow_waiting_on_a_message_nobody_sent_is_reported(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        handle = await DurableClient(durable_store).start_workflow(wfs.receiver, key, "t", None)
        with pytest.raises(InvalidStateError, match="waits for message:t"):
            await runner.run_until_complete(handle)

    async def test_events_and_messages_between_runs(self, durable_store: Store, key: str) -> None:
        runner = self._runner(durable_store)
        client = DurableClient(durable_store)
        handle = await client.start_workflow(wfs.publisher, key)
        assert await handle.get_event("stage", timeout=0) is None
        assert await runner.run_once(handle) is WorkflowStatus.WAITING
        assert await handle.get_event("stage") == 1
        await client.send(handle.id, "go", topic="go")
        assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED
        assert await handle.get_event("stage") == 2
        assert await handle.output() == "go"

    async def test_children_started_in_a_body_run_once_and_fan_in(
        self, durable_store: Store, key: str
    ) -> None:
        runner = self._runner(durable_store)
        handle = await DurableClient(durable_store).start_workflow(wfs.fan_out, key, 5)
        assert await runner.run_until_complete(handle) is WorkflowStatus.SUCCEEDED
        assert await handle.output() == 2 * sum(range(5))
        assert wfs.CALLS[key] == ["echo"] * 5, "each child ran its step once"
        children = [
            r
            for r in await durable_store.list_workflows(name=wfs.doubled.name, limit=1000)
            if r.parent_id == handle.id
        ]
        assert len(children) == 5
        assert (await self._row(durable_store, handle.id)).attempts == 1
