"""The worker registry of the shared SQL store (the ``workflow_workers`` table, schema 6).

A worker writes its row when it starts and again every heartbeat interval (one
upsert), each time pushing ``expires_at`` a lock timeout ahead; a clean stop
moves ``expires_at`` to now. A row whose ``expires_at`` has passed is a gone
worker's, whether it stopped or died: liveness is read off the clock, and rows
gone for a day are deleted by the next beat of any worker.

Where the database can tell when a session ends (PostgreSQL: a session-level advisory
lock is free once its session is gone), a worker also holds a liveness lock on a
session of its own and its row names it (``session_key``, ``session_epoch``, schema
12). A worker whose lock is free is dead, whatever its ``expires_at`` says: any other
worker marks it gone and ends the leases it held (:func:`~durable_core.sql.rules.end_lease`),
so the next claim takes its workflows over at once instead of when their leases run out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..seams.operators import WorkerRecord, dump_names, load_names
from . import schema
from .base import SQLStoreBase
from .connector import Row
from .dialect import SQLDialect, const
from .rules import end_lease, leased_to, param, wf

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
            "session_key": param("session", sa.Integer()),
            "session_epoch": param("epoch", wk.c.session_epoch.type),
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
        gone = dialect.session_gone(wk.c.session_key, wk.c.session_epoch)
        self.dead: sa.Select[Any] | None = None
        """The workers whose liveness session ended (``None``: the dialect cannot tell)."""
        self.bury: sa.Executable | None = None
        """Mark gone the workers whose liveness session ended; their ids (a worker's
        row is buried once: it names no session after)."""
        if gone is not None:
            dead = sa.and_(wk.c.session_key.is_not(None), gone)
            self.dead = sa.select(wk.c.worker_id).where(dead)
            self.bury = (
                wk.update()
                .where(dead)
                .values(
                    session_key=sa.null(),
                    session_epoch=sa.null(),
                    in_flight=const(0),
                    expires_at=sa.case((wk.c.expires_at > now, now), else_=wk.c.expires_at),
                )
                .returning(wk.c.worker_id)
            )
        self.end_leases = dialect.wake_workers(
            wf.update().where(leased_to(dialect, param("worker"))).values(end_lease(dialect))
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

    def worker_session(self, worker_id: str) -> tuple[int | None, datetime | None]:
        """The liveness lock ``worker_id`` holds now, and when the server holding it started
        (``(None, None)``: none; a store that offers liveness locks says)."""
        return None, None

    async def beat_worker(self, worker: WorkerRecord, ttl_seconds: float) -> None:
        """Write ``worker``'s row, live for ``ttl_seconds`` from now, naming the liveness
        lock it holds (:meth:`worker_session`); forget the rows of workers gone for a day."""
        key, epoch = self.worker_session(worker.worker_id)
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
            "session": key,
            "epoch": epoch,
        }
        async with self._transaction("beat_worker") as session:
            bind = self.dialect.bind_clock
            await session.execute(self._wq.forget, bind({"forget_seconds": -FORGET_AFTER_SECONDS}))
            await session.execute(self._wq.beat, bind(params))

    async def leave_worker(self, worker_id: str) -> None:
        """Mark the worker gone now (its row stays, expired, for a day)."""
        await self._execute("leave_worker", self._wq.leave, {"worker": worker_id})

    async def end_dead_leases(self) -> dict[str, int]:
        """Mark gone each worker whose liveness session has ended, and end now the leases
        it held, so that the next claim takes its workflows over: how many each had, by
        worker id (each dead worker is reported to one caller, once; one that stopped
        cleanly had none). Nothing where the dialect cannot tell a session's end."""
        q = self._wq
        if q.dead is None or q.bury is None:
            return {}
        if not await self._fetch("end_dead_leases", q.dead, {}):
            return {}  # the usual answer, in one read and no transaction
        ended = {}
        async with self._transaction("end_dead_leases") as session:
            buried = await session.fetch(q.bury, self.dialect.bind_clock({}))
            for row in buried:
                params = self.dialect.bind_clock({"worker": row["worker_id"]})
                ended[row["worker_id"]] = await session.execute(q.end_leases, params)
        return ended

    async def list_workers(self, *, gone_within_seconds: float = 0.0) -> list[WorkerRecord]:
        """The live workers, and those gone within the last ``gone_within_seconds``, by id."""
        params = {"gone_seconds": -float(gone_within_seconds)}
        rows = await self._fetch("list_workers", self._wq.listed, params)
        return [worker_from_row(row) for row in rows]
