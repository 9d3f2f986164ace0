"""Sagas in the shared SQL store: the rule for a cancel of a workflow that owes
compensations, written once (no table of its own: schema 8 as it was).

A workflow **owes** compensations while a ``durable.compensate`` step row of it has no
``durable.saga_end`` row with the same input (the saga's path, as JSON): see
:mod:`durable_core.seams.compensation_role`. Cancelling it then does not end it: the
cancel is a **request**, a ``workflow_messages`` row on the reserved topic
``durable.cancel`` holding the cancellation's error. A running row keeps its lease (and
its worker hears the cancel, where the database announces it); a pending or waiting row
is made due now, so a worker runs its compensations. The worker settles it cancelled
with :meth:`CompensationOperations.settle_cancelled`, which marks the request done in the
same transaction.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

import sqlalchemy as sa

from ..seams.records import Lease, StepStatus, WaitKind, WorkflowStatus
from . import errors, schema
from .base import SQLStoreBase
from .dialect import SQLDialect, const
from .rules import PENDING, RUNNING, WAITING, param, wf

st = schema.workflow_steps
msg = schema.workflow_messages

COMPENSATE = "durable.compensate"
"""The step name of a compensation's registration (its input: the saga's path, as JSON)."""
SAGA_END = "durable.saga_end"
"""The step name of a saga's end (its input: the saga's path, as JSON)."""
CANCEL_TOPIC = "durable.cancel"
"""The reserved message topic of a cancel request."""


def owes(workflow_id: sa.ColumnElement[Any]) -> sa.Exists:
    """Whether the workflow ``workflow_id`` owes compensations: the rule, written once."""
    registered = st.alias("registered")
    ended = st.alias("ended")
    end = sa.select(ended.c.step_index).where(
        ended.c.workflow_id == registered.c.workflow_id,
        ended.c.step_name == const(SAGA_END),
        ended.c.input == registered.c.input,
    )
    return sa.exists(
        sa.select(registered.c.step_index).where(
            registered.c.workflow_id == workflow_id,
            registered.c.step_name == const(COMPENSATE),
            registered.c.status == const(StepStatus.SUCCEEDED.value),
            ~sa.exists(end),
        )
    )


class CompensationStatements:
    """The statements of the cancel request, built once for one dialect."""

    def __init__(self, dialect: SQLDialect) -> None:
        d, now = dialect, dialect.now()
        mine = wf.c.id == param("workflow")
        # A running row keeps its lease; the cancel is announced to the worker running it.
        self.request_running = d.announce_cancel(
            wf.update().where(mine, wf.c.status == RUNNING, owes(wf.c.id)).values(updated_at=now)
        )
        # A pending or waiting row runs now, to compensate.
        woken = d.wake_workers(
            wf.update()
            .where(mine, wf.c.status.in_([PENDING, WAITING]), owes(wf.c.id))
            .values(status=PENDING, run_at=now, waiting_for=sa.null(), updated_at=now)
        )
        self.request_idle = d.announce_cancel(cast(sa.Update, woken))
        self.owed = sa.select(owes(param("workflow", sa.String())).label("owed"))
        self.request = d.ignore_duplicates(
            d.insert(msg).values(
                workflow_id=param("workflow"),
                topic=const(CANCEL_TOPIC),
                message_id=param("message_id"),
                payload=param("error_json"),
                sent_at=now,
            ),
            [msg.c.workflow_id, msg.c.message_id],
        )
        pending = sa.and_(
            msg.c.workflow_id == param("workflow"),
            msg.c.topic == const(CANCEL_TOPIC),
            msg.c.consumed_at.is_(None),
        )
        self.requested = sa.select(msg.c.payload).where(pending).order_by(msg.c.seq).limit(const(1))
        self.done = msg.update().where(pending).values(consumed_at=now)


class CompensationOperations(SQLStoreBase):
    """The :class:`~durable_core.seams.compensation_role.Compensations` role (mixed into
    ``SQLStore``), and the request half of its cancel."""

    _compensation_statements: CompensationStatements | None = None

    @property
    def _cq(self) -> CompensationStatements:
        if self._compensation_statements is None:
            self._compensation_statements = CompensationStatements(self.dialect)
        return self._compensation_statements

    async def owes_compensation(self, workflow_id: str) -> bool:
        """Whether ``workflow_id`` has a saga with a compensation recorded and no end."""
        rows = await self._fetch("owes_compensation", self._cq.owed, {"workflow": workflow_id})
        return bool(rows and rows[0]["owed"])

    async def cancel_requested(self, workflow_id: str) -> str | None:
        """The error JSON of a cancel requested of ``workflow_id`` and not yet settled."""
        rows = await self._fetch("cancel_requested", self._cq.requested, {"workflow": workflow_id})
        return str(rows[0]["payload"]) if rows else None

    async def _request_cancel(self, workflow_id: str, error: str) -> bool:
        """Make a cancel of ``workflow_id`` a request when it owes compensations (the
        request recorded with ``error``); ``False``, writing nothing, when it owes none."""
        q = self._cq
        bind = self.dialect.bind_clock
        params = {
            "workflow": workflow_id,
            "error_json": error,
            "message_id": f"{CANCEL_TOPIC}:{uuid.uuid4().hex}",
        }
        async with self._transaction("cancel_workflow") as session:
            running = await session.execute(q.request_running, bind(params))
            if not running and not await session.execute(q.request_idle, bind(params)):
                return False
            await session.execute(q.request, bind(params))
        return True

    async def settle_cancelled(
        self, lease: Lease, error: str | None, *, parent_id: str | None = None
    ) -> bool:
        """Settle the workflow of ``lease`` as cancelled when a cancel was requested of it,
        recording ``error`` (``None``: the request's), the request done, in one transaction
        fenced by the lease; wake ``parent_id`` if it waits on it."""
        requested = await self.cancel_requested(lease.workflow_id)
        if requested is None:
            return False
        q, bind = self.statements, self.dialect.bind_clock
        outcome = WorkflowStatus.CANCELLED.value
        params = bind(
            {
                "workflow": lease.workflow_id,
                "token": lease.token,
                "output_json": None,
                "error_json": error if error is not None else requested,
                "outcome": outcome,
                "attempt_no": lease.attempt,
                "worker_name": lease.worker_id,
                "started": lease.started_at,
                "ended": None,
                "ended_as": outcome,
            }
        )
        async with self._transaction("settle_cancelled") as session:
            if parent_id is not None:
                await session.fetch(q.lock, {"workflow": parent_id})
            if not await session.execute(q.settle_final, params):
                raise errors.lease_lost(lease, "settling as cancelled")
            await session.execute(self._cq.done, params)
            await session.execute(q.record_attempt, params)
            if parent_id is not None:
                waiting_for = f"{WaitKind.CHILD.value}:{lease.workflow_id}"
                await session.execute(
                    q.wake, bind({"workflow": parent_id, "waiting_for": waiting_for})
                )
        return True


__all__ = ["CANCEL_TOPIC", "COMPENSATE", "SAGA_END", "CompensationOperations", "owes"]
