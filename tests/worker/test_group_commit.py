"""Group commit on the real PostgreSQL: the flush statement, the worker's batching, and a
worker SIGKILLed while a flush is in flight."""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta

import anyio
import asyncpg
import pytest

from durable_core import DurableClient, WorkflowConfig, WorkflowStatus
from durable_core.errors import FrameworkError, LeaseLostError
from durable_core.runtime.batches import with_step
from durable_core.runtime.group_commit import GroupCommit
from durable_core.runtime.worker import WorkflowWorker
from durable_core.seams.records import (
    ClaimedWorkflow,
    Lease,
    Settlement,
    StepStatus,
    StepWrite,
)
from durable_postgres import PostgresStore
from tests.worker import app
from tests.worker.conftest import Workers, eventually, side_table_writes_ended


class RecordingStore(PostgresStore):
    """The real PostgreSQL store, keeping every batch it is asked to write."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.batches: list[tuple[list[StepWrite], list[Settlement]]] = []

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        self.batches.append((list(steps), list(settlements)))
        return await super().write_batch(steps, settlements)


async def leased(pg: PostgresStore, count: int, worker: str = "w1") -> list[ClaimedWorkflow]:
    """Start ``count`` workflows and take the lease on each."""
    handles = await DurableClient(pg).start_workflows(app.three_steps, [(n,) for n in range(count)])
    claimed = []
    for handle in handles:
        taken = await pg.acquire(handle.id, worker_id=worker, lease_seconds=30)
        assert taken is not None
        claimed.append(taken)
    return claimed


async def reclaim(pg: PostgresStore, sql: asyncpg.Connection, lease: Lease) -> Lease:
    """Expire ``lease`` and let another worker take the workflow: ``lease`` is a zombie's."""
    await sql.execute(
        "UPDATE workflows SET locked_until = now() - interval '1 second' WHERE id = $1",
        lease.workflow_id,
    )
    taken = await pg.acquire(lease.workflow_id, worker_id="w2", lease_seconds=30, due_only=False)
    assert taken is not None
    return taken.lease


def step(lease: Lease, index: int, status: StepStatus, **fields: object) -> StepWrite:
    return StepWrite(lease, index, f"s{index}", status, '{"args":[],"kwargs":{}}', **fields)  # type: ignore[arg-type]


# -- the flush statement ------------------------------------------------------------------------


async def test_one_flush_writes_every_row_and_refuses_a_zombies_one_by_one(
    pg: PostgresStore, sql: asyncpg.Connection
) -> None:
    a, b, c, d = (w.lease for w in await leased(pg, 4))
    zombie = c
    current = await reclaim(pg, sql, c)
    steps = [
        step(a, 0, StepStatus.SUCCEEDED, output="1", began=time.monotonic() - 2.0),
        step(a, 1, StepStatus.RUNNING, began=time.monotonic() - 0.5),
        step(b, 0, StepStatus.FAILED, error='{"type":"x"}'),
        step(zombie, 0, StepStatus.SUCCEEDED, output="zombie"),
    ]
    settlements = [
        Settlement(b, WorkflowStatus.PENDING, error='{"type":"x"}', retry_delay_seconds=60),
        Settlement(zombie, WorkflowStatus.SUCCEEDED, output='"zombie"'),
        Settlement(d, WorkflowStatus.SUCCEEDED, output='"done"'),
    ]
    landed = await pg.write_batch(steps, settlements)
    assert landed == ([True, True, True, False], [True, False, True])
    # (One worker's batch never holds two writes of one step row: the holder's is alone.)
    assert await pg.write_batch([step(current, 0, StepStatus.RUNNING)], []) == ([True], [])

    rows = await sql.fetch(
        "SELECT workflow_id, step_index, status, output, error, attempts,"
        " completed_at IS NULL AS open, extract(epoch FROM now() - started_at) AS age"
        " FROM workflow_steps ORDER BY workflow_id, step_index"
    )
    by_key = {(r["workflow_id"], r["step_index"]): r for r in rows}
    assert set(by_key) == {
        (a.workflow_id, 0),
        (a.workflow_id, 1),
        (b.workflow_id, 0),
        (c.workflow_id, 0),
    }
    assert (by_key[a.workflow_id, 0]["status"], by_key[a.workflow_id, 0]["output"]) == (
        "succeeded",
        "1",
    )
    assert by_key[a.workflow_id, 0]["age"] >= 1.9, "a late-written row starts when its step began"
    assert by_key[a.workflow_id, 1]["open"] and by_key[a.workflow_id, 1]["status"] == "running"
    assert by_key[b.workflow_id, 0]["status"] == "failed"
    # The zombie's output never landed: the current holder's running row is there.
    assert (by_key[c.workflow_id, 0]["status"], by_key[c.workflow_id, 0]["output"]) == (
        "running",
        None,
    )
    assert {r["attempts"] for r in rows} == {1}

    workflows = {
        r["id"]: r
        for r in await sql.fetch(
            "SELECT id, status, output, lock_token, run_at > now() + interval '50 seconds' AS later"
            " FROM workflows"
        )
    }
    assert (workflows[b.workflow_id]["status"], workflows[b.workflow_id]["later"]) == (
        "pending",
        True,
    )
    assert workflows[b.workflow_id]["lock_token"] is None
    assert (workflows[c.workflow_id]["status"], workflows[c.workflow_id]["lock_token"]) == (
        "running",
        current.token,
    )
    assert (workflows[d.workflow_id]["status"], workflows[d.workflow_id]["output"]) == (
        "succeeded",
        '"done"',
    )
    history = await sql.fetch("SELECT workflow_id, attempt, worker, outcome FROM workflow_attempts")
    assert sorted((r["workflow_id"], r["outcome"]) for r in history) == sorted(
        [(b.workflow_id, "retry"), (d.workflow_id, "succeeded")]
    )


@pytest.mark.parametrize(
    "outputs",
    [
        # Texts the flush's packing cannot carry (a separator inside, the NULL element
        # itself) beside ones it can; a lone empty text; None among texts.
        ["a\x1fb", "\x1e", "", None, "plain"],
        [""],
        ["x\x1e", "", "\x1f"],
        [None, "1"],
        # One write alone: the NULL element as a value, a separator inside.
        ["\x1e"],
        ["a\x1fb"],
    ],
)
async def test_a_flush_writes_every_text_as_given(
    pg: PostgresStore, sql: asyncpg.Connection, outputs: list[str | None]
) -> None:
    claimed = await leased(pg, len(outputs))
    steps = [
        step(w.lease, 0, StepStatus.SUCCEEDED, output=output, path=f"p{n}\x1f")
        for n, (w, output) in enumerate(zip(claimed, outputs, strict=True))
    ]
    settlements = [
        Settlement(w.lease, WorkflowStatus.SUCCEEDED, output=o)
        for w, o in zip(claimed, outputs, strict=True)
    ]
    assert await pg.write_batch(steps, settlements) == ([True] * len(steps), [True] * len(steps))
    ids = [w.lease.workflow_id for w in claimed]
    rows = await sql.fetch(
        "SELECT s.output AS step_output, s.path, w.output FROM workflow_steps s"
        " JOIN workflows w ON w.id = s.workflow_id WHERE s.workflow_id = ANY($1)",
        ids,
    )
    assert len(rows) == len(outputs)
    by_path = {r["path"]: r for r in rows}
    for n, output in enumerate(outputs):
        assert (by_path[f"p{n}\x1f"]["step_output"], by_path[f"p{n}\x1f"]["output"]) == (
            output,
            output,
        )


async def test_a_step_ended_after_its_running_row_keeps_one_try_and_its_start(
    pg: PostgresStore, sql: asyncpg.Connection
) -> None:
    [claimed] = await leased(pg, 1)
    lease = claimed.lease
    assert await pg.write_batch(
        [step(lease, 0, StepStatus.RUNNING, began=time.monotonic() - 0.2)], []
    ) == (
        [True],
        [],
    )
    started = await sql.fetchval("SELECT started_at FROM workflow_steps")
    ended = step(lease, 0, StepStatus.SUCCEEDED, output="7", new_try=False)
    assert await pg.write_batch([ended], []) == ([True], [])
    row = await sql.fetchrow(
        "SELECT status, output, attempts, started_at, completed_at FROM workflow_steps"
    )
    assert (row["status"], row["output"], row["attempts"]) == ("succeeded", "7", 1)
    assert row["started_at"] == started and row["completed_at"] is not None
    # A second try of the same step counts.
    again = step(lease, 0, StepStatus.FAILED, error='{"type":"y"}')
    assert await pg.write_batch([again], []) == ([True], [])
    assert await sql.fetchval("SELECT attempts FROM workflow_steps") == 2


async def test_each_failed_step_keeps_its_try_and_a_zombies_keeps_none(
    pg: PostgresStore, sql: asyncpg.Connection
) -> None:
    a, b = (w.lease for w in await leased(pg, 2))
    zombie = b
    await reclaim(pg, sql, b)
    began = time.monotonic() - 1.0
    first = [
        step(a, 0, StepStatus.FAILED, error='"e1"', began=began, path="2.1"),
        step(zombie, 0, StepStatus.FAILED, error='"zombie"'),
    ]
    assert await pg.write_batch(first, []) == ([True, False], [])
    # A second try with its running row, ended later; a third that ends with its settlement.
    assert await pg.write_batch([step(a, 0, StepStatus.RUNNING, path="2.1")], []) == ([True], [])
    second = step(a, 0, StepStatus.FAILED, error='"e2"', new_try=False, path="2.1")
    assert await pg.write_batch([second], []) == ([True], [])
    third = step(a, 0, StepStatus.FAILED, error='"e3"', path="2.1")
    retry = Settlement(a, WorkflowStatus.PENDING, error='"e3"', step=third)
    assert await pg.write_batch([], [retry]) == ([], [True])

    tries = await pg.load_step_tries(a.workflow_id)
    assert [(t.step_index, t.try_number, t.error) for t in tries] == [
        (0, 1, '"e1"'),
        (0, 2, '"e2"'),
        (0, 3, '"e3"'),
    ]
    assert tries[0].ended_at - tries[0].started_at >= timedelta(seconds=0.9), (
        "a try written late starts when it began"
    )
    assert await pg.load_step_tries(b.workflow_id) == [], "a refused write keeps no try"
    [row] = await pg.load_steps(a.workflow_id)
    assert (row.status, row.attempts, row.error, row.path) == (StepStatus.FAILED, 3, '"e3"', "2.1")


async def test_a_step_row_landing_after_its_workflows_settlement_is_refused(
    pg: PostgresStore, sql: asyncpg.Connection
) -> None:
    """With two flushes in flight, a flush carrying a step's ``running`` row may commit after
    the one carrying its workflow's settlement (a body stopped inside the step). The
    settlement ends the lease, and every step row is fenced by it: the late row is refused
    and the settled workflow keeps no ``running`` step (issue 34, suspected defect)."""
    [claimed] = await leased(pg, 1)
    lease = claimed.lease
    settled = Settlement(lease, WorkflowStatus.FAILED, error='{"type":"x"}')
    assert await pg.write_batch([], [settled]) == ([], [True])
    late = step(lease, 0, StepStatus.RUNNING)
    assert await pg.write_batch([late], []) == ([False], [])
    assert await sql.fetchval("SELECT count(*) FROM workflow_steps") == 0
    assert await sql.fetchval("SELECT status FROM workflows") == "failed"


# -- the worker's batching ----------------------------------------------------------------------


@pytest.fixture
async def recording(postgres_url: str, pg: PostgresStore) -> AsyncIterator[RecordingStore]:
    store = RecordingStore(postgres_url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def flushing(group: GroupCommit) -> AsyncIterator[None]:
    """``group``'s flusher running for the block."""
    async with anyio.create_task_group() as flusher:
        flusher.start_soon(group.run)
        yield
        flusher.cancel_scope.cancel()


def written(store: RecordingStore) -> list[StepWrite]:
    """Every step write the store was sent, those that went with a settlement included."""
    return [
        write
        for steps, settlements in store.batches
        for write in [*steps, *(x.step for x in settlements if x.step is not None)]
    ]


async def run_steps(group: GroupCommit, lease: Lease, steps: int, pause: float = 0.0) -> None:
    """A body of ``steps`` steps of ``pause`` seconds each, then its settlement."""
    for index in range(steps):
        await group.start_step(lease, index, f"s{index}", "{}")
        await anyio.sleep(pause)
        await group.complete_step(lease, index, str(index))
    await group.settle(Settlement(lease, WorkflowStatus.SUCCEEDED, output="0"))


async def test_a_lone_workflow_writes_at_once_and_its_last_step_goes_with_its_settlement(
    recording: RecordingStore, sql: asyncpg.Connection
) -> None:
    [claimed] = await leased(recording, 1)
    lease = claimed.lease
    group = GroupCommit(recording, step_row_after=60)
    async with flushing(group):
        await group.start_step(lease, 0, "s0", "{}")
        await group.complete_step(lease, 0, "0")
        assert recording.batches == [], "a step's end is written behind, its start not at all"
        with anyio.fail_after(120):  # nothing waits for company
            await group.start_step(lease, 1, "s1", "{}")
        assert await sql.fetchval("SELECT status FROM workflow_steps") == "succeeded", (
            "the step before committed before the next one began"
        )
        await group.complete_step(lease, 1, "1")
        await group.settle(Settlement(lease, WorkflowStatus.SUCCEEDED, output="1"))
    assert [(len(steps), len(settled)) for steps, settled in recording.batches] == [(1, 0), (0, 1)]
    assert recording.batches[1][1][0].step == written(recording)[1]
    assert group.flushes == 2 and group.writes == 3
    rows = await sql.fetch("SELECT step_index, status, attempts FROM workflow_steps ORDER BY 1")
    assert [tuple(r) for r in rows] == [(0, "succeeded", 1), (1, "succeeded", 1)]
    assert await sql.fetchval("SELECT status FROM workflows") == "succeeded"


async def test_concurrent_workflows_share_flushes(recording: RecordingStore) -> None:
    claimed = await leased(recording, 20)
    group = GroupCommit(recording, step_row_after=60)
    async with flushing(group), anyio.create_task_group() as workflows:
        for item in claimed:
            workflows.start_soon(run_steps, group, item.lease, 3)
    assert group.writes == 80  # 60 step ends and 20 settlements
    assert group.flushes <= 8, f"20 three-step workflows took {group.flushes} flushes"
    for steps, settlements in recording.batches:
        assert not {w.lease.workflow_id for w in steps} & {
            x.lease.workflow_id for x in settlements
        }, "a flush never writes a workflow's row and its step rows both"
    assert {w.status for w in written(recording)} == {StepStatus.SUCCEEDED}, (
        "fast steps wrote one row each, with their output, and no running row"
    )


class OverlapStore(RecordingStore):
    """Notes how many flushes are in flight at once, and holds each until another begins
    (or a moment has passed), so that pipelining shows."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.in_flight = 0
        self.most = 0
        self.overlapping: list[int] = []
        """The sizes of the batches that went out while another flush was in flight."""
        self.began = anyio.Event()
        self.first = anyio.Event()

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        if self.in_flight:
            self.overlapping.append(len(steps) + len(settlements))
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.first.set()
        self.began.set()
        self.began = began = anyio.Event()
        try:
            with anyio.move_on_after(0.05):
                await began.wait()
            return await super().write_batch(steps, settlements)
        finally:
            self.in_flight -= 1


async def test_pipelined_flushes_overlap_up_to_their_limit_and_keep_a_minimum_batch(
    postgres_url: str, pg: PostgresStore, sql: asyncpg.Connection
) -> None:
    store = OverlapStore(postgres_url)
    await store.open()
    try:
        claimed = await leased(store, 40)
        group = GroupCommit(store, step_row_after=60, flushes_in_flight=2, flush_min_batch=4)
        async with flushing(group), anyio.create_task_group() as workflows:
            for item in claimed[:20]:
                workflows.start_soon(run_steps, group, item.lease, 3)
            await store.first.wait()  # the others begin while a flush is in flight
            for item in claimed[20:]:
                workflows.start_soon(run_steps, group, item.lease, 3)
    finally:
        await store.close()
    assert store.most == 2, "a flush went out while another was in flight, never a third"
    assert store.overlapping and min(store.overlapping) >= 4, store.overlapping
    assert group.writes == 160  # 120 step ends and 40 settlements
    rows = await sql.fetch("SELECT status, count(*) FROM workflows GROUP BY 1")
    assert [tuple(r) for r in rows] == [("succeeded", 40)]
    assert await sql.fetchval("SELECT count(*) FROM workflow_steps") == 120
    assert await sql.fetchval("SELECT count(*) FROM workflow_attempts") == 40


async def test_pipelined_the_writer_filling_a_batch_sends_it_before_the_others_run(
    recording: RecordingStore, sql: asyncpg.Connection
) -> None:
    """Workflows in step with each other all resume when one flush ends; the flusher's task
    would run after every one of them, so every flush would carry all their writes and the
    database would wait for the worker's Python. The writer that fills a batch to the
    minimum sends it itself, while the others still run."""
    claimed = await leased(recording, 40)
    group = GroupCommit(recording, step_row_after=60, flushes_in_flight=2, flush_min_batch=8)
    async with flushing(group), anyio.create_task_group() as workflows:
        for item in claimed:
            workflows.start_soon(run_steps, group, item.lease, 3)
    sizes = [len(steps) + len(settlements) for steps, settlements in recording.batches]
    assert max(sizes) < 40, f"a flush waited for all 40 workflows' writes: {sizes}"
    assert sizes.count(8) >= 4, f"the writers sent batches of the minimum: {sizes}"
    assert group.writes == 160  # 120 step ends and 40 settlements
    rows = await sql.fetch("SELECT status, count(*) FROM workflows GROUP BY 1")
    assert [tuple(r) for r in rows] == [("succeeded", 40)]
    assert await sql.fetchval("SELECT count(*) FROM workflow_steps WHERE status = 'succeeded'") == (
        120
    )


async def test_a_long_step_gets_its_running_row_while_it_runs(
    recording: RecordingStore, sql: asyncpg.Connection
) -> None:
    [claimed] = await leased(recording, 1)
    lease = claimed.lease
    group = GroupCommit(recording, step_row_after=0.05)
    async with flushing(group):
        await group.start_step(lease, 0, "s0", "{}")

        async def running_row() -> bool:
            return bool(await sql.fetchval("SELECT status FROM workflow_steps") == "running")

        await eventually(running_row, timeout=120, what="the long step's running row")
        await group.complete_step(lease, 0, "1")
        await group.settle(Settlement(lease, WorkflowStatus.SUCCEEDED, output="1"))
    row = await sql.fetchrow(
        "SELECT status, attempts, completed_at - started_at AS took FROM workflow_steps"
    )
    assert (row["status"], row["attempts"]) == ("succeeded", 1)
    assert row["took"].total_seconds() >= 0.05
    assert [(w.status, w.new_try) for w in written(recording)] == [
        (StepStatus.RUNNING, True),
        (StepStatus.SUCCEEDED, False),
    ]


async def test_running_rows_written_late_land_beside_other_writes(
    recording: RecordingStore, sql: asyncpg.Connection
) -> None:
    long, *fast = (w.lease for w in await leased(recording, 6))
    group = GroupCommit(recording, step_row_after=0.05)
    async with flushing(group), anyio.create_task_group() as workflows:
        workflows.start_soon(run_steps, group, long, 1, 0.3)
        await anyio.sleep(0.06)  # the long step's running row goes out at the next tick
        for lease in fast:
            workflows.start_soon(run_steps, group, lease, 2, 0.02)
    rows = await sql.fetch("SELECT workflow_id, step_index, status, attempts FROM workflow_steps")
    assert {tuple(r) for r in rows} == {(long.workflow_id, 0, "succeeded", 1)} | {
        (lease.workflow_id, i, "succeeded", 1) for lease in fast for i in (0, 1)
    }
    mine = [w for w in written(recording) if w.lease == long]
    assert [(w.status, w.new_try) for w in mine] == [
        (StepStatus.RUNNING, True),
        (StepStatus.SUCCEEDED, False),
    ]


async def test_with_step_row_after_0_the_running_row_is_written_before_the_body(
    recording: RecordingStore, sql: asyncpg.Connection
) -> None:
    [claimed] = await leased(recording, 1)
    group = GroupCommit(recording, step_row_after=0)
    async with flushing(group):
        await group.start_step(claimed.lease, 0, "s0", "{}")
        assert await sql.fetchval("SELECT status FROM workflow_steps") == "running"
        await group.complete_step(claimed.lease, 0, "1")
        await group.settle(Settlement(claimed.lease, WorkflowStatus.SUCCEEDED, output="1"))
    row = await sql.fetchrow("SELECT status, attempts FROM workflow_steps")
    assert (row["status"], row["attempts"]) == ("succeeded", 1)


async def test_a_zombie_write_is_refused_while_the_rest_of_its_flush_lands(
    recording: RecordingStore, sql: asyncpg.Connection
) -> None:
    kept, lost = (w.lease for w in await leased(recording, 2))
    await reclaim(recording, sql, lost)
    group = GroupCommit(recording, step_row_after=60)
    outcomes: dict[str, str] = {}

    async def write(lease: Lease) -> None:
        await group.start_step(lease, 0, "s0", "{}")
        await group.complete_step(lease, 0, "1")
        try:
            await group.start_step(lease, 1, "s1", "{}")  # only once step 0 has committed
        except LeaseLostError as exc:
            outcomes[lease.workflow_id] = f"lost: {exc}"
        else:
            outcomes[lease.workflow_id] = "landed"

    async with flushing(group), anyio.create_task_group() as writers:
        writers.start_soon(write, kept)
        writers.start_soon(write, lost)
    assert len(recording.batches) == 1, "both writes went out in one flush"
    assert outcomes[kept.workflow_id] == "landed"
    assert outcomes[lost.workflow_id].startswith(
        f"lost: worker w1 no longer holds workflow {lost.workflow_id}"
    )
    rows = await sql.fetch("SELECT workflow_id FROM workflow_steps")
    assert [r["workflow_id"] for r in rows] == [kept.workflow_id]


async def test_a_failed_flush_is_raised_and_its_step_ends_go_out_again(
    recording: RecordingStore, sql: asyncpg.Connection
) -> None:
    [claimed] = await leased(recording, 1)
    lease = claimed.lease
    group = GroupCommit(recording, step_row_after=60)
    async with flushing(group):
        await group.start_step(lease, 0, "s0", "{}")
        await group.complete_step(lease, 0, "1")
        await recording.close()  # the next flush fails
        with pytest.raises(FrameworkError):
            await group.start_step(lease, 1, "s1", "{}")
        await recording.open()
        await group.start_step(lease, 1, "s1", "{}")  # what an attempt's retry does
        await group.complete_step(lease, 1, "2")
        await recording.close()  # the settlement's flush fails, its last step with it
        with pytest.raises(FrameworkError):
            await group.settle(Settlement(lease, WorkflowStatus.SUCCEEDED, output="2"))
        await recording.open()
        await group.settle(Settlement(lease, WorkflowStatus.SUCCEEDED, output="2"))
    rows = await sql.fetch("SELECT step_index, status, attempts FROM workflow_steps ORDER BY 1")
    assert [tuple(r) for r in rows] == [(0, "succeeded", 1), (1, "succeeded", 1)]
    assert await sql.fetchval("SELECT status FROM workflows") == "succeeded"


@pytest.mark.anyio  # marked at collection too, so parametrize keeps its ids
@pytest.mark.parametrize("step_row_after", [60, 0])
async def test_a_step_failing_twice_then_succeeding_keeps_two_tries(
    recording: RecordingStore, step_row_after: float
) -> None:
    [claimed] = await leased(recording, 1)
    lease = claimed.lease
    group = GroupCommit(recording, step_row_after=step_row_after)
    async with flushing(group):
        for n in (1, 2):
            await group.start_step(lease, 0, "s0", "{}", path="3.0.2")
            await group.fail_step(lease, 0, f'{{"type": "E", "message": "try {n}"}}')
        await group.start_step(lease, 0, "s0", "{}", path="3.0.2")
        await group.complete_step(lease, 0, "1")
        await group.record_step(lease, 1, "durable.send", "[]", "null", path="4.1")
        await group.settle(Settlement(lease, WorkflowStatus.SUCCEEDED, output="1"))
    tries = await recording.load_step_tries(lease.workflow_id)
    assert [(t.step_index, t.try_number, t.error) for t in tries] == [
        (0, 1, '{"type": "E", "message": "try 1"}'),
        (0, 2, '{"type": "E", "message": "try 2"}'),
    ]
    assert all(t.started_at <= t.ended_at for t in tries)
    steps = await recording.load_steps(lease.workflow_id)
    assert [(s.status, s.attempts, s.path) for s in steps] == [
        (StepStatus.SUCCEEDED, 3, "3.0.2"),
        (StepStatus.SUCCEEDED, 1, "4.1"),
    ]


# -- a crash in the middle of a flush -----------------------------------------------------------


async def test_sigkill_while_a_flush_is_in_flight_loses_nothing_committed(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    client = DurableClient(pg)
    gate = await client.start_workflow(app.slow_flow, 2.0)
    # No running rows: a step in flight at the kill has no row at all.
    victim = workers.start(
        WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=32, WORKFLOW_STEP_ROW_AFTER_MS=60000
    )

    async def gate_runs() -> bool:
        return bool(await sql.fetchval("SELECT count(*) FROM step_runs WHERE step = 'slow'"))

    await eventually(gate_runs, timeout=120, what="the gate workflow's step to run")
    # Hold the gate's row: the flush carrying the gate's step (2 s into it) waits on the
    # lock, and the writes of the workflows still running gather behind it.
    blocker = await asyncpg.connect(workers.url.replace("postgresql+asyncpg://", "postgresql://"))
    transaction = blocker.transaction()
    await transaction.start()
    await blocker.execute("SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE", gate.id)
    handles = await client.start_workflows(app.paced, [(5, 0.6)] * 30)

    async def flush_blocked() -> bool:
        return bool(
            await sql.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'WITH settled AS%'"
            )
        )

    await eventually(flush_blocked, timeout=120, what="a flush waiting on the gate's row")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=120)
    await side_table_writes_ended(sql)
    ran_before = {
        (r["workflow_id"], r["step"])
        for r in await sql.fetch("SELECT workflow_id, step FROM step_runs")
    }
    await transaction.rollback()
    await blocker.close()

    async def flush_ended() -> bool:
        return not await sql.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'WITH settled AS%'"
            " AND state = 'active'"
        )

    await eventually(flush_ended, timeout=120, what="the killed worker's flush to end")
    rows = await sql.fetch(
        "SELECT workflow_id, step_index FROM workflow_steps WHERE status = 'succeeded'"
    )
    committed = {(r["workflow_id"], f"paced{r['step_index']}") for r in rows}
    for handle in handles:  # each step committed before the next one began: a prefix
        indexes = sorted(int(step[5:]) for w, step in committed if w == handle.id)
        assert indexes == list(range(len(indexes)))

    workers.start(WORKFLOW_LOCK_TIMEOUT_SECS=2, WORKFLOW_CONCURRENCY=32)
    assert await gate.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    for handle in handles:
        assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    assert [await h.output() for h in handles] == [10] * 30

    runs = await sql.fetch("SELECT workflow_id, step FROM step_runs WHERE step LIKE 'paced%'")
    counts: dict[tuple[str, str], int] = {}
    for r in runs:
        counts[r["workflow_id"], r["step"]] = counts.get((r["workflow_id"], r["step"]), 0) + 1
    assert len(counts) == 150, "every step of every workflow ran"
    ran_again = {key for key, n in counts.items() if n == 2}
    assert set(counts.values()) <= {1, 2}
    assert not ran_again & committed, "a step committed before the kill never ran again"
    assert ran_again == (ran_before - committed) & set(counts), (
        "exactly the steps that had run without committing ran again"
    )
    assert ran_again, "some steps had run but not committed at the kill"


# -- turning it off -----------------------------------------------------------------------------


async def test_workflow_group_commit_0_writes_each_row_alone(
    pg: PostgresStore, workers: Workers, sql: asyncpg.Connection
) -> None:
    assert isinstance(WorkflowWorker(pg, WorkflowConfig()).group, GroupCommit)
    assert WorkflowWorker(pg, WorkflowConfig(group_commit=0)).group is None
    handles = await DurableClient(pg).start_workflows(app.three_steps, [(n,) for n in range(50)])
    proc = workers.start(WORKFLOW_GROUP_COMMIT=0, WORKFLOW_CONCURRENCY=8)
    for handle in handles:
        assert await handle.wait_with_timeout(60) is WorkflowStatus.SUCCEEDED
    runs = await sql.fetch("SELECT workflow_id, step, count(*) AS n FROM step_runs GROUP BY 1, 2")
    assert len(runs) == 150 and {r["n"] for r in runs} == {1}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    assert "flushes" not in workers.log(proc), "no group commit ran"


def test_with_step_is_replace_with_every_field_kept() -> None:
    # Every field set to its own value, so a field added to Settlement and not kept fails.
    values: dict[str, object] = {f.name: object() for f in dataclasses.fields(Settlement)}
    settlement = Settlement(**values)  # type: ignore[arg-type]
    step = StepWrite(Lease("w", "t", "k"), 2, "s", StepStatus.SUCCEEDED, "[]", "1", None)
    assert with_step(settlement, step) == dataclasses.replace(settlement, step=step)
    assert with_step(settlement, step).step is step
