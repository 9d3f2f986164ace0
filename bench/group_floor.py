"""The group-commit floor: the naive floor's rows, the writes of all workflows in flight
sent together.

A workflow hands each write (a step row, or its settle) to one flusher and waits until
that write has committed before its next step starts, as in the naive floor. The flusher
sends everything handed to it since its last flush as one multi-row statement
(:data:`bench.own_sql.FLUSH`, ``unnest`` arrays), in its own transaction; while that
flush is in flight the next one gathers. A lone write goes out at once: nothing waits
on a timer. Run as ``python -m bench.group_floor``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from bench import own_sql, serving

APPLICATION_NAME = "durable_floor_group"


@dataclass
class _Batch:
    """Writes gathered for one flush, as the statement's arrays."""

    step_ids: list[str] = field(default_factory=list)
    step_tokens: list[str] = field(default_factory=list)
    step_indexes: list[int] = field(default_factory=list)
    step_names: list[str] = field(default_factory=list)
    step_inputs: list[str] = field(default_factory=list)
    step_outputs: list[str] = field(default_factory=list)
    settle_ids: list[str] = field(default_factory=list)
    settle_tokens: list[str] = field(default_factory=list)
    settle_outputs: list[str] = field(default_factory=list)
    settle_attempts: list[int] = field(default_factory=list)
    settle_workers: list[str] = field(default_factory=list)
    settle_started: list[datetime] = field(default_factory=list)
    waiters: list[tuple[str, asyncio.Future[None]]] = field(default_factory=list)


class GroupCommitter:
    """Gathers fenced writes and commits each gathering with one statement, one flush in
    flight at a time (the next gathers meanwhile)."""

    def __init__(
        self, conn: asyncpg.Connection, *, flush: str = own_sql.FLUSH, attempts: bool = True
    ) -> None:
        self._conn = conn
        self._flush = flush
        self._attempts = attempts
        """Whether the flush records each settled attempt (its ``$10..$12``)."""
        self._batch = _Batch()
        self._ready = asyncio.Event()
        self.flushes = 0
        self.writes = 0

    def _wait(self, workflow_id: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._batch.waiters.append((workflow_id, future))
        self._ready.set()
        return future

    async def step(
        self, workflow_id: str, token: str, index: int, name: str, input: str, output: str
    ) -> None:
        """Record a succeeded step; returns once it has committed."""
        b = self._batch
        b.step_ids.append(workflow_id)
        b.step_tokens.append(token)
        b.step_indexes.append(index)
        b.step_names.append(name)
        b.step_inputs.append(input)
        b.step_outputs.append(output)
        await self._wait(workflow_id)

    async def settle(
        self,
        workflow_id: str,
        token: str,
        output: str,
        attempt: int,
        worker_id: str,
        claimed_at: datetime,
    ) -> None:
        """Settle a workflow as succeeded and record its attempt; returns once committed."""
        b = self._batch
        b.settle_ids.append(workflow_id)
        b.settle_tokens.append(token)
        b.settle_outputs.append(output)
        b.settle_attempts.append(attempt)
        b.settle_workers.append(worker_id)
        b.settle_started.append(claimed_at)
        await self._wait(workflow_id)

    async def run(self) -> None:
        """Flush whatever has gathered, one flush at a time, until cancelled."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._batch = self._batch, _Batch()
            try:
                args: list[object] = [
                    batch.step_ids,
                    batch.step_tokens,
                    batch.step_indexes,
                    batch.step_names,
                    batch.step_inputs,
                    batch.step_outputs,
                    batch.settle_ids,
                    batch.settle_tokens,
                    batch.settle_outputs,
                ]
                if self._attempts:
                    args += [batch.settle_attempts, batch.settle_workers, batch.settle_started]
                row = await self._conn.fetchrow(self._flush, *args)
            except Exception as exc:
                for _, future in batch.waiters:
                    future.set_exception(exc)
                continue
            assert row is not None
            landed = {*(row["stepped"] or ()), *(row["settled"] or ())}
            self.flushes += 1
            self.writes += len(batch.waiters)
            for workflow_id, future in batch.waiters:
                if workflow_id in landed:
                    future.set_result(None)
                else:
                    future.set_exception(own_sql.LeaseLost(workflow_id))


async def run_worker(
    url: str,
    *,
    concurrency: int,
    steps: int,
    poll_ms: float,
    flush: str = own_sql.FLUSH,
    attempts: bool = True,
    name: str = "group floor",
) -> None:
    """Claim and run rows until SIGTERM (``flush``: the statement, recording each attempt
    when ``attempts``)."""
    dsn = own_sql.dsn_of(url)
    options = serving.connect_options(APPLICATION_NAME)
    claimer = await asyncpg.connect(dsn, **options)
    writer = await asyncpg.connect(dsn, **options)
    committer = GroupCommitter(writer, flush=flush, attempts=attempts)
    flusher = asyncio.create_task(committer.run())

    async def run_one(row: asyncpg.Record, worker_id: str) -> None:
        workflow_id, input_json, token, attempt, claimed_at = row
        n = own_sql.first_argument(input_json)
        for index in range(steps):
            output = own_sql.body(index, n)
            await committer.step(
                workflow_id,
                token,
                index,
                own_sql.step_name(index),
                own_sql.step_input(n),
                str(output),
            )
            n = output
        await committer.settle(workflow_id, token, str(n), attempt, worker_id, claimed_at)

    try:
        await serving.serve(
            dsn,
            APPLICATION_NAME,
            concurrency=concurrency,
            poll_ms=poll_ms,
            claim=own_sql.claim_with(claimer),
            run_one=run_one,
        )
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        print(f"{name}: {committer.writes} writes in {committer.flushes} flushes", flush=True)
        await writer.close()
        await claimer.close()


def main() -> None:
    """``python -m bench.group_floor``: a group-commit-floor worker process."""
    serving.floor_main("bench.group_floor", run_worker)


if __name__ == "__main__":
    main()
