"""Updates in the shared SQL store (the ``workflow_updates`` table, schema 7).

A caller's send locks the workflow's row before it writes, as a message's send does,
so a body suspending on ``update:<name>`` either sees the update or is woken by it.
The body takes an update in the transaction that records its receiving call, and
replies through a write fenced by its lease; a second reply changes nothing.
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from ..errors import UpdateConflictError, UpdateNotHandledError, WorkflowNotFoundError
from ..seams.records import BodyCall, Lease, UpdateRecord, UpdateStatus, WaitKind, WorkflowStatus
from . import schema
from .base import SQLStoreBase
from .connector import Row
from .dialect import SQLDialect, const
from .rules import param, wf

up = schema.workflow_updates

PENDING_UPDATE = (
    sa.select(up.c.update_id, up.c.name, up.c.payload, up.c.status, up.c.reply, up.c.error)
    .where(
        up.c.workflow_id == param("workflow"),
        up.c.name == param("name"),
        up.c.status == const(UpdateStatus.PENDING.value),
    )
    .order_by(up.c.seq)
    .limit(const(1))
)
"""The oldest pending update of a name (what ends a wait on ``update:<name>``)."""


class UpdateStatements:
    """Every statement on ``workflow_updates``, built once for one dialect."""

    def __init__(self, dialect: SQLDialect) -> None:
        now = dialect.now()
        this = sa.and_(up.c.workflow_id == param("workflow"), up.c.update_id == param("update"))
        self.locked = sa.select(wf.c.status).where(wf.c.id == param("workflow")).with_for_update()
        self.find = sa.select(
            up.c.update_id, up.c.name, up.c.payload, up.c.status, up.c.reply, up.c.error
        ).where(this)
        self.insert = dialect.insert(up).values(
            workflow_id=param("workflow"),
            update_id=param("update"),
            name=param("name"),
            payload=param("payload"),
            status=const(UpdateStatus.PENDING.value),
            sent_at=now,
        )
        pending = up.c.status == const(UpdateStatus.PENDING.value)
        self.take = up.update().where(this, pending).values(status=const("taken"))
        self.reject = (
            up.update()
            .where(this, pending)
            .values(status=const("rejected"), error=param("error_json"), replied_at=now)
        )
        self.reply = dialect.announce_talk(
            up.update()
            .where(this, up.c.status == const(UpdateStatus.TAKEN.value))
            .values(status=const("replied"), reply=param("reply_json"), replied_at=now),
            up.c.workflow_id,
        )


def update_from_row(workflow_id: str, row: Row) -> UpdateRecord:
    """An :class:`UpdateRecord` from a ``workflow_updates`` row."""
    return UpdateRecord(
        workflow_id=workflow_id,
        update_id=row["update_id"],
        name=row["name"],
        payload=row["payload"],
        status=UpdateStatus(row["status"]),
        reply=row["reply"],
        error=row["error"],
    )


class UpdateOperations(SQLStoreBase):
    """Send, take, reject and reply to updates (mixed into ``SQLStore``)."""

    _update_statements: UpdateStatements | None = None

    @property
    def _upq(self) -> UpdateStatements:
        if self._update_statements is None:
            self._update_statements = UpdateStatements(self.dialect)
        return self._update_statements

    async def send_update(
        self, workflow_id: str, update_id: str, name: str, payload: str
    ) -> UpdateRecord:
        """Add the update unless its id is there (then the same request must repeat) and
        wake the workflow if it waits on ``name``; the update as it stands."""
        await self.check_values(f"update {name!r} of workflow {workflow_id}", payload)
        q, uq = self.statements, self._upq
        params = {"workflow": workflow_id, "update": update_id}
        async with self._transaction("send_update") as session:
            bind = self.dialect.bind_clock
            found = await session.fetch(uq.locked, {"workflow": workflow_id})
            if not found:
                raise WorkflowNotFoundError(
                    f"cannot update workflow {workflow_id!r}: no such workflow in "
                    f"{self._description}"
                )
            existing = await session.fetch(uq.find, params)
            if existing:
                record = update_from_row(workflow_id, existing[0])
                if (record.name, json.loads(record.payload)) != (name, json.loads(payload)):
                    raise UpdateConflictError(
                        f"update {update_id!r} of workflow {workflow_id} was sent as "
                        f"{record.name!r} with another payload; an update id names one request"
                    )
                return record
            status = WorkflowStatus(found[0]["status"])
            if status.is_terminal:
                raise UpdateNotHandledError(
                    f"cannot update workflow {workflow_id}: it is {status.value}"
                )
            await session.execute(uq.insert, bind({**params, "name": name, "payload": payload}))
            waiting_for = f"{WaitKind.UPDATE.value}:{name}"
            await session.execute(
                q.wake, bind({"workflow": workflow_id, "waiting_for": waiting_for})
            )
        return UpdateRecord(workflow_id, update_id, name, payload, UpdateStatus.PENDING, None, None)

    async def get_update(self, workflow_id: str, update_id: str) -> UpdateRecord | None:
        """The update, or ``None``."""
        rows = await self._fetch(
            "get_update", self._upq.find, {"workflow": workflow_id, "update": update_id}
        )
        return update_from_row(workflow_id, rows[0]) if rows else None

    async def next_update(self, workflow_id: str, name: str) -> UpdateRecord | None:
        """The oldest pending update of ``name``, or ``None``."""
        rows = await self._fetch(
            "next_update", PENDING_UPDATE, {"workflow": workflow_id, "name": name}
        )
        return update_from_row(workflow_id, rows[0]) if rows else None

    async def take_update(
        self,
        lease: Lease,
        update_id: str,
        step_index: int,
        step_name: str,
        input: str,
        output: str,
        *,
        path: str | None = None,
    ) -> bool:
        """Mark the pending update taken and record the receiving step, in one transaction
        fenced by ``lease``; False (nothing written) if it is not pending."""
        call = BodyCall(lease, step_index, step_name, input, output, path)
        await self._check_call(call)
        what = f"taking update {update_id!r}"
        async with self._transaction("take_update") as session:
            await self._fence(session, lease, what)
            params = {"workflow": lease.workflow_id, "update": update_id}
            if not await session.execute(self._upq.take, self.dialect.bind_clock(params)):
                return False
            await self._record_call(session, call, what)
        return True

    async def reject_update(self, lease: Lease, update_id: str, error: str) -> None:
        """Mark the pending update rejected with ``error`` (fenced by ``lease``)."""
        await self._settle_update(lease, update_id, self._upq.reject, {"error_json": error})

    async def reply_update(
        self, lease: Lease, update_id: str, reply: str, *, call: BodyCall | None = None
    ) -> None:
        """Record ``reply`` to the taken update (with ``call``, the body's call, in the same
        transaction); a second reply changes nothing."""
        await self.check_values(f"reply to update {update_id!r}", reply)
        await self._settle_update(lease, update_id, self._upq.reply, {"reply_json": reply}, call)

    async def _settle_update(
        self,
        lease: Lease,
        update_id: str,
        statement: sa.Executable,
        values: dict[str, str],
        call: BodyCall | None = None,
    ) -> None:
        what = f"answering update {update_id!r}"
        if call is not None:
            await self._check_call(call)
        async with self._transaction("reply_update") as session:
            await self._fence(session, lease, what)
            params = {"workflow": lease.workflow_id, "update": update_id, **values}
            await session.execute(statement, self.dialect.bind_clock(params))
            if call is not None:
                await self._record_call(session, call, what)
