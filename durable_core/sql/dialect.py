"""What differs between SQL databases, and nothing else: the clock, upserts, RETURNING, locks.

A :class:`SQLDialect` is handed to :class:`~durable_core.sql.statements.Statements`,
which writes every rule once in SQLAlchemy Core; the dialect only says how
this database spells what the rule needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.dml import Insert

from ..durations import utcnow
from .coltypes import UTCDateTime

Excluded = Callable[[str], sa.ColumnElement[Any]]
"""In an upsert's ``SET``, the value the conflicting insert proposed for a column."""


def const(value: str | int) -> sa.ColumnElement[Any]:
    """A constant written into the statement text (not a parameter), so the planner sees it.

    Only for the library's own constants (statuses, counts), never for user data.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"const() takes a str or an int, not {value!r}")
    if isinstance(value, int):
        return sa.literal_column(str(value), sa.Integer)
    return sa.literal_column("'" + value.replace("'", "''") + "'", sa.String)


class SQLDialect:
    """The per-database part of the shared SQL rules.

    The default clock is the client's: :meth:`bind_clock` reads the time once per
    statement and turns every ``*_seconds`` parameter into the moment that many
    seconds later (SQLite cannot add an interval to a stored time). A database
    with a trustworthy server clock overrides :meth:`now`, :meth:`after` and
    :meth:`bind_clock`, so that every worker leases by the same clock.
    """

    name: ClassVar[str] = "sql"
    update_returning: ClassVar[bool] = False
    plan_for_values: ClassVar[str | None] = None
    """A statement that makes the next ones of its transaction planned for their values
    (where statements are otherwise planned once): run before a list whose filters'
    selectivity decides which index to walk."""
    """Whether ``UPDATE ... RETURNING`` works (then acquiring a lease is one statement)."""

    def now(self) -> sa.ColumnElement[datetime]:
        """The current time, as this database's statements see it."""
        return sa.bindparam("now", type_=UTCDateTime())

    def after(self, seconds: str) -> sa.ColumnElement[datetime]:
        """The time ``seconds`` from now, the seconds bound as the parameter of that name
        (which must end in ``_seconds``)."""
        if not seconds.endswith("_seconds"):
            raise ValueError(f"a duration parameter's name ends in _seconds, not {seconds!r}")
        return sa.bindparam(seconds, type_=UTCDateTime())

    def bind_clock(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """``params`` with ``now`` added and each ``*_seconds`` duration made a moment."""
        now = utcnow()
        bound = {**params, "now": now}
        for name, value in params.items():
            if name.endswith("_seconds") and value is not None:
                bound[name] = now + timedelta(seconds=float(value))
        return bound

    sqlalchemy_dialect: ClassVar[ModuleType] = sqlite
    """The SQLAlchemy dialect package whose ``insert()`` can upsert."""

    def insert(self, table: sa.Table) -> Insert:
        """An INSERT this dialect can turn into an upsert."""
        insert: Insert = self.sqlalchemy_dialect.insert(table)
        return insert

    def ignore_duplicates(self, insert: Insert, keys: Sequence[sa.Column[Any]]) -> Insert:
        """``insert``, skipping each row whose ``keys`` exist already."""
        new: Any = insert
        return new.on_conflict_do_nothing(index_elements=keys)  # type: ignore[no-any-return]

    def upsert(
        self,
        insert: Insert,
        keys: Sequence[sa.Column[Any]],
        set_: Callable[[Excluded], Mapping[str, Any]],
    ) -> sa.Executable:
        """``insert``, updating the existing row with ``set_`` when ``keys`` conflict.

        ``ON CONFLICT (keys) DO UPDATE`` here (PostgreSQL and SQLite spell it so);
        a database that spells it otherwise overrides this.
        """
        new: Any = insert
        return new.on_conflict_do_update(  # type: ignore[no-any-return]
            index_elements=list(keys), set_=dict(set_(lambda column: new.excluded[column]))
        )

    def wake_workers(self, statement: sa.Update | Insert) -> sa.Executable:
        """``statement``, made to wake idle workers when it commits (where the database can)."""
        return statement

    def announce_schedules(self, statement: sa.Insert | sa.Update) -> sa.Executable:
        """``statement``, which adds or changes a schedule, made to tell the workers'
        schedulers when it commits (where the database can; else they poll)."""
        return statement

    def announce_cancel(self, statement: sa.Update) -> sa.Executable:
        """``statement``, which cancels workflows, made to tell the workers running them to
        stop at once when it commits (where the database can; else they find out at
        their next write)."""
        return statement

    def announce_talk(
        self, statement: sa.Insert | sa.Update, workflow_id: sa.ColumnElement[Any]
    ) -> sa.Executable:
        """``statement``, which writes a stream value or an update's reply of the workflow
        ``workflow_id`` (a column of its table), made to wake that workflow's readers and
        callers when it commits (where the database can; else they poll)."""
        return statement

    def before_quote(self, text: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """``text`` up to its first double quote (all of it when it has none)."""
        quote = sa.literal('"')
        cut = sa.func.instr(text, quote)
        return sa.case((cut > 0, sa.func.substr(text, 1, cut - 1)), else_=text)

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[Any]:
        """The seconds from the moment ``start`` to the moment ``end``."""
        return (sa.func.julianday(end) - sa.func.julianday(start)) * 86400.0

    def session_gone(
        self, key: sa.ColumnElement[Any], epoch: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[bool] | None:
        """Whether the database session that took the liveness lock ``key`` on the server
        started at ``epoch`` has ended (its lock is free, on that same server); ``None``
        where a database cannot tell (a worker's liveness is then its lease alone). A
        dialect that can tell has :attr:`update_returning`."""
        return None

    @contextlib.contextmanager
    def migration_lock(self, conn: sa.Connection) -> Iterator[None]:
        """Held while the schema is upgraded, so two processes never upgrade at once."""
        yield

    def one_of(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        """``column`` is one of the list bound as the parameter ``name``."""
        return column.in_(sa.bindparam(name, expanding=True))

    def prune_turn(self, *, wait: bool) -> sa.Executable | None:
        """A statement that takes, until its transaction ends, the one turn of prunes (where
        the database has such locks; ``None``: it needs none, writes being serialized), its
        first column false when ``wait`` is false and another transaction holds it."""
        return None
