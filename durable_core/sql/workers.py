"""The worker registry of the shared SQL store (the ``workflow_workers`` table, schema 6).

A worker writes its row when it starts and again every heartbeat interval (one
upsert), each time pushing ``expires_at`` a lock timeout ahead; a clean stop
moves ``expires_at`` to now. A row whose ``expires_at`` has passed is a gone
worker's, whether it stopped or died: liveness is read off the clock, and rows
gone for a day are deleted by the next beat of any worker.
"""

from __future__ import annotations

import sqlalchemy as sa

from ..seams.operators import WorkerRecord, dump_names, load_names
from . import schema
from .base import SQLStoreBase
from .connector import Row
from .dialect import SQLDialect
from .rules import param

wk = schema.workflow_workers

FORGET_AFTER_SECONDS = 86400.0
"""A gone worker's row is deleted this long after it expired."""


class WorkerStatements:
    """Every statement on ``workflow_workers``, built once for one dialect."""

    def __init__(self, dialect: SQLDialect) -> None:
        now = dialect.now()
        row = {
            "worker_id": param("worker"),
            "host": param("host"),
            "pid": param("pid", sa.Integer()),
            "concurrency": param("concurrency", sa.Integer()),
            "queues": param("queue_names", sa.Text()),
            "names": param("workflow_names", sa.Text()),
            "in_flight": param("busy", sa.Integer()),
            "started_at": param("started", wk.c.started_at.type),
            "heartbeat_at": now,
            "expires_at": dialect.after("ttl_seconds"),
        }
        insert = dialect.insert(wk).values(row)
        self.beat = dialect.upsert(
            insert,
            [wk.c.worker_id],
            lambda new: {name: new(name) for name in row if name != "worker_id"},
        )
        self.forget = wk.delete().where(wk.c.expires_at < dialect.after("forget_seconds"))
        self.leave = (
            wk.update()
            .where(wk.c.worker_id == param("worker"))
            .values(expires_at=now, heartbeat_at=now, in_flight=0)
        )
        self.listed = (
            sa.select(wk, (wk.c.expires_at > now).label("live"))
            .where(wk.c.expires_at > dialect.after("gone_seconds"))
            .order_by(wk.c.worker_id)
        )


def worker_from_row(row: Row) -> WorkerRecord:
    """A :class:`WorkerRecord` from a ``workflow_workers`` row (with its ``live`` flag)."""
    return WorkerRecord(
        worker_id=row["worker_id"],
        host=row["host"],
        pid=int(row["pid"]),
        concurrency=int(row["concurrency"]),
        queues=load_names(row["queues"]),
        names=load_names(row["names"]),
        in_flight=int(row["in_flight"]),
        started_at=row["started_at"],
        heartbeat_at=row["heartbeat_at"],
        expires_at=row["expires_at"],
        live=bool(row["live"]),
    )


class WorkerOperations(SQLStoreBase):
    """Keep and read the workers' rows (mixed into ``SQLStore``)."""

    _worker_statements: WorkerStatements | None = None

    @property
    def _wq(self) -> WorkerStatements:
        if self._worker_statements is None:
            self._worker_statements = WorkerStatements(self.dialect)
        return self._worker_statements

    async def beat_worker(self, worker: WorkerRecord, ttl_seconds: float) -> None:
        """Write ``worker``'s row, live for ``ttl_seconds`` from now; forget the rows of
        workers gone for a day."""
        params = {
            "worker": worker.worker_id,
            "host": worker.host,
            "pid": worker.pid,
            "concurrency": worker.concurrency,
            "queue_names": dump_names(worker.queues),
            "workflow_names": dump_names(worker.names),
            "busy": worker.in_flight,
            "started": worker.started_at,
            "ttl_seconds": float(ttl_seconds),
        }
        async with self._transaction("beat_worker") as session:
            bind = self.dialect.bind_clock
            await session.execute(self._wq.forget, bind({"forget_seconds": -FORGET_AFTER_SECONDS}))
            await session.execute(self._wq.beat, bind(params))

    async def leave_worker(self, worker_id: str) -> None:
        """Mark the worker gone now (its row stays, expired, for a day)."""
        await self._execute("leave_worker", self._wq.leave, {"worker": worker_id})

    async def list_workers(self, *, gone_within_seconds: float = 0.0) -> list[WorkerRecord]:
        """The live workers, and those gone within the last ``gone_within_seconds``, by id."""
        params = {"gone_seconds": -float(gone_within_seconds)}
        rows = await self._fetch("list_workers", self._wq.listed, params)
        return [worker_from_row(row) for row in rows]
