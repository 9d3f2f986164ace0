"""Streams in the shared SQL store (the ``workflow_streams`` table, schema 7).

A body appends each value of a key at the key's next offset, in the transaction
that records the writing call's step: the workflow's row is locked first (so two
branches of one body take offsets one after the other), the write is fenced by
the lease, and a replay finds the step recorded and writes nothing. A row whose
value is NULL closes its key.
"""

from __future__ import annotations

import anyio
import sqlalchemy as sa

from ..errors import StreamClosedError
from ..seams.records import BodyCall, Lease, StreamPage
from ..seams.talk_roles import Watch, check_key
from . import schema
from .base import SQLStoreBase
from .dialect import SQLDialect, const
from .rules import param

sm = schema.workflow_streams

"""The longest stream key."""


class StreamStatements:
    """Every statement on ``workflow_streams``, built once for one dialect."""

    def __init__(self, dialect: SQLDialect) -> None:
        # The next offset is read in the statement that takes it: on SQLite, whose FOR UPDATE
        # locks nothing, the insert's write lock is what orders two branches' writes.
        mine = sa.and_(sm.c.workflow_id == param("workflow"), sm.c.key == param("key"))
        following = sa.select(
            param("workflow", sa.String()),
            param("key", sa.String()),
            sa.func.coalesce(sa.func.max(sm.c.stream_offset), const(-1)) + const(1),
            param("value", sa.Text()),
            dialect.now(),
        ).where(mine)
        self.append = dialect.announce_talk(
            dialect.insert(sm).from_select(
                ["workflow_id", "key", "stream_offset", "value", "written_at"], following
            ),
            sm.c.workflow_id,
        )
        # The two newest entries of a key: the one just appended, and the one before it.
        self.last = (
            sa.select(sm.c.stream_offset, sm.c.value.is_(None).label("closed"))
            .where(mine)
            .order_by(sm.c.stream_offset.desc())
            .limit(const(2))
        )
        self.read = (
            sa.select(sm.c.stream_offset, sm.c.value)
            .where(
                sm.c.workflow_id == param("workflow"),
                sm.c.key == param("key"),
                sm.c.stream_offset >= param("offset", sa.Integer()),
            )
            .order_by(sm.c.stream_offset)
            .limit(param("limit", sa.Integer()))
        )


class StreamOperations(SQLStoreBase):
    """Write and read streams (mixed into ``SQLStore``)."""

    _stream_statements: StreamStatements | None = None

    @property
    def _stq(self) -> StreamStatements:
        if self._stream_statements is None:
            self._stream_statements = StreamStatements(self.dialect)
        return self._stream_statements

    async def write_stream(
        self,
        lease: Lease,
        key: str,
        value: str | None,
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> int:
        """Append ``value`` (``None``: close the key) at ``key``'s next offset and record the
        step with that offset as its output, in one transaction; the offset."""
        check_key(key)
        await self.check_values(f"write_stream {key!r}", value, input)
        sq, what = self._stq, f"writing stream {key!r}"
        mine = {"workflow": lease.workflow_id, "key": key}
        async with self._transaction("write_stream") as session:
            await self._fence(session, lease, what)
            await session.execute(sq.append, self.dialect.bind_clock({**mine, "value": value}))
            last = await session.fetch(sq.last, mine)
            if len(last) > 1 and last[1]["closed"]:  # rolled back with what it appended
                raise StreamClosedError(
                    f"workflow {lease.workflow_id} wrote to stream {key!r} after closing it"
                )
            at = int(last[0]["stream_offset"])
            call = BodyCall(lease, step_index, step_name, input, str(at), path)
            await self._record_call(session, call, what)
        return at

    async def read_stream(
        self, workflow_id: str, key: str, offset: int = 0, limit: int = 1000
    ) -> StreamPage:
        """At most ``limit`` entries of ``key`` from ``offset`` on, and whether it is closed."""
        params = {"workflow": workflow_id, "key": key, "offset": offset, "limit": limit}
        rows = await self._fetch("read_stream", self._stq.read, params)
        entries = [(int(r["stream_offset"]), r["value"]) for r in rows]
        closed = bool(entries) and entries[-1][1] is None
        if closed:
            entries.pop()
        return StreamPage(entries, closed)

    def watch(self, workflow_id: str) -> Watch:
        """A watch on ``workflow_id``'s streams and replies (here: its reader polls)."""
        return PollingWatch()


class PollingWatch:
    """A watch that hears nothing: its reader polls (every store that cannot notify)."""

    notified = False

    async def wait(self, timeout: float) -> None:
        """Sleep ``timeout`` seconds."""
        await anyio.sleep(max(timeout, 0.0))

    async def close(self) -> None:
        """Nothing to release."""
