"""``PostgresStore``: the shared SQL store on PostgreSQL, and the only claimer.

Every operation is one statement on a pooled asyncpg connection (see
:mod:`durable_postgres.connector`). Times come from the server clock.
Enqueueing sends ``NOTIFY durable_workflows`` in the same statement, and
:meth:`PostgresStore.wait_for_work` wakes on it through a dedicated
``LISTEN`` connection (:mod:`durable_postgres.listener`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, unquote_plus

import anyio
import asyncpg
import sqlalchemy as sa
from anyio.abc import TaskStatus

from durable_core.definitions.queues import Route
from durable_core.errors import ConfigurationError, InvalidDatabaseURLError, StoreError
from durable_core.redaction import MASK, is_secret_name
from durable_core.seams.records import ClaimedWorkflow, Settlement, StepWrite
from durable_core.seams.talk_roles import Watch
from durable_core.sql import SQLStore
from durable_core.sql.rows import claimed_from_row
from durable_core.sql.streams import PollingWatch
from durable_core.sql.urls import parse_url

from . import flush
from .connector import AsyncpgConnector, driver_error
from .dialect import CANCEL_CHANNEL, CHANNEL, SCHEDULE_CHANNEL, PostgresDialect, PostgresStatements
from .hosts import split_hosts, with_hosts, writable_by_default
from .listener import Listener
from .liveness import LivenessLock
from .outage import quiet_pool_floor
from .pooler import (
    DIRECT_URL_OPTION,
    POOLER_OPTION,
    Pooler,
    parse_pooler,
    plan,
    pooler_hint,
    pop_option,
    url_settings,
)
from .talk import TalkFeed

_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg")
_POOL_ONLY_OPTIONS = frozenset(
    {
        "init_size",
        "max_queries",
        "max_inactive_connection_lifetime",
        "connect",
        "setup",
        "init",
        "reset",
    }
)
# Each statement is planned once per connection (``plan_cache_mode =
# force_generic_plan``), and never as a sequential scan where an index serves it
# (``enable_seqscan = off``): every statement the store sends has its index. Left to
# itself (``auto``), PostgreSQL re-planned the claim and the settle on every call once the
# tables had statistics (planning cost twice running them or more), and on tables never
# analysed kept plans that scan ``workflows`` twice per workflow; a generic plan alone
# froze such a scan, made beside empty tables (bench ``plans``). Queries that must be
# planned for their values (listing with filters) plan so locally. A URL's
# ``?plan_cache_mode=...`` or ``?enable_seqscan=...`` still sets either.
_DEFAULT_SERVER_SETTINGS = {
    "application_name": "durable",
    "jit": "off",
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
}
_CLAIM_LISTEN_TIMEOUT = 5.0
_MIN_WAIT = 0.005

__all__ = ["CHANNEL", "PostgresStore", "normalize_url"]


def normalize_url(url: str) -> tuple[str, str]:
    """Check a PostgreSQL URL; return ``(asyncpg DSN, description without password)``.

    Accepts ``postgresql://``, ``postgres://`` and ``postgresql+asyncpg://``.
    """
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        if sep and scheme.lower().startswith("postgresql+"):
            raise InvalidDatabaseURLError(
                f"PostgreSQL URL names driver {scheme.partition('+')[2]!r}; durable_postgres "
                "uses asyncpg: write postgresql://user:password@host:5432/dbname"
            )
        raise InvalidDatabaseURLError(
            "not a PostgreSQL URL (expected postgresql://user:password@host:5432/dbname)"
        )
    dsn = f"postgresql://{rest}"
    single, hostlist = split_hosts(dsn)
    parsed = parse_url(single, "PostgreSQL")
    # Secrets are masked before the query is decoded: decoded, a value may hold a space
    # or a quote, and no rule could then tell where it ends.
    query = {key: (MASK if is_secret_name(key) else value) for key, value in parsed.query.items()}
    shown = sa.URL.create(
        "postgresql",
        parsed.username,
        None,
        parsed.host,
        parsed.port,
        parsed.database,
        query,
    ).render_as_string(hide_password=False)
    if hostlist is not None:
        shown = with_hosts(shown, hostlist)
    return dsn, f"PostgreSQL {unquote_plus(shown)}"


_LISTEN_OPTION = "durable_listen"
_LIVENESS_OPTION = "durable_liveness"
_COMMAND_TIMEOUT_OPTION = "durable_command_timeout"
_POOL_SIZE_OPTION = "durable_pool_size"
_DEFAULT_POOL_SIZE = 10
_OFF = frozenset({"off", "false", "0", "no"})
_ON = frozenset({"on", "true", "1", "yes"})


def _pop_switch(dsn: str, option: str) -> tuple[str, bool | None]:
    """Remove ``option=on|off`` from the DSN's query; return ``(dsn, on)`` (``None``: not
    given)."""
    base, sep, query = dsn.partition("?")
    if not sep:
        return dsn, None
    switch: bool | None = None
    kept = []
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key != option:
            kept.append(part)
        elif value.lower() in _OFF:
            switch = False
        elif value.lower() in _ON:
            switch = True
        else:
            raise InvalidDatabaseURLError(
                f"{option}={value!r} in the PostgreSQL URL: use on or off"
            )
    return base + ("?" + "&".join(kept) if kept else ""), switch


def _command_timeout(value: str | None) -> dict[str, float]:
    """The pool's ``command_timeout`` for a URL's ``durable_command_timeout`` (seconds)."""
    if value is None:
        return {}
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidDatabaseURLError(
            f"{_COMMAND_TIMEOUT_OPTION}={value!r} in the PostgreSQL URL: use a number of "
            "seconds above 0"
        )
    return {"command_timeout": seconds}


def _pool_size(value: str | None, min_size: int) -> int:
    """The pool's ``max_size`` for a URL's ``durable_pool_size`` (10 when not given)."""
    if value is None:
        return max(_DEFAULT_POOL_SIZE, min_size)
    if not value.strip().isdigit() or int(value) < max(min_size, 1):
        raise InvalidDatabaseURLError(
            f"{_POOL_SIZE_OPTION}={value!r} in the PostgreSQL URL: use a whole number of "
            f"connections, at least {max(min_size, 1)}"
        )
    return int(value)


def _chosen(argument: bool | None, in_url: bool | None) -> bool:
    """A switch: the argument when given, else the URL's option, else on."""
    if argument is not None:
        return argument
    return True if in_url is None else in_url


class PostgresStore(SQLStore):
    """Workflows in PostgreSQL: a :class:`~durable_core.seams.store.Store` and the ``Claimer``.

    ``url`` is ``postgresql://user:password@host:5432/dbname`` (``postgres://`` and
    ``postgresql+asyncpg://`` work too; ``?host=/socket/dir`` reaches a unix
    socket). ``min_size``/``max_size`` bound the pool (``max_size`` 10 unless given, or
    ``?durable_pool_size=N`` in the URL); other keyword arguments go
    to :func:`asyncpg.create_pool` and :func:`asyncpg.connect`. ``listen=False``
    (or ``?durable_listen=off`` in the URL) turns ``LISTEN`` off: workers then
    find new work by polling alone. ``liveness=False`` (``?durable_liveness=off``)
    turns off the liveness session each worker holds (see
    :mod:`durable_postgres.liveness`): the workflows of a killed worker are then taken
    over when their leases expire. Its connections plan each statement once and never
    as a sequential scan (``plan_cache_mode = force_generic_plan``,
    ``enable_seqscan = off``); a URL's own ``?plan_cache_mode=`` or ``?enable_seqscan=``
    wins, as does any server setting in its query (``?statement_timeout=30s``).
    ``?durable_command_timeout=SECONDS`` bounds each statement of the pool on the
    client's side. A worker's flushes and claims each keep a connection of the pool
    (see :class:`~durable_postgres.connector.HeldConnection`) when it can spare them.

    Behind a connection pooler, ``pooler`` (``?durable_pooler=``) names its mode,
    ``transaction`` or ``session`` (see :mod:`durable_postgres.pooler`); behind a
    transaction pooler, ``direct_url`` (``?durable_direct_url=``, percent-encoded) is a
    URL straight to PostgreSQL for ``LISTEN`` and the liveness sessions, without which
    both are off.
    """

    statements: PostgresStatements

    _key_pivot = ""
    """The last concurrency key this store claimed: where the next claim walks keys from."""

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int | None = None,
        listen: bool | None = None,
        liveness: bool | None = None,
        pooler: str | None = None,
        direct_url: str | None = None,
        **connect_kwargs: Any,
    ) -> None:
        url, pooler_in_url = pop_option(url, POOLER_OPTION)
        url, direct_in_url = pop_option(url, DIRECT_URL_OPTION)
        url, command_timeout = pop_option(url, _COMMAND_TIMEOUT_OPTION)
        url, pool_size = pop_option(url, _POOL_SIZE_OPTION)
        if max_size is None:
            max_size = _pool_size(pool_size, min_size)
        self.pooler = parse_pooler(pooler if pooler is not None else pooler_in_url)
        """What stands between this store and PostgreSQL (``durable_pooler``)."""
        dsn, description = normalize_url(url)
        dsn, listen_in_url = _pop_switch(dsn, _LISTEN_OPTION)
        dsn, liveness_in_url = _pop_switch(dsn, _LIVENESS_OPTION)
        options = {k: v for k, v in connect_kwargs.items() if k not in _POOL_ONLY_OPTIONS}
        from_url: dict[str, str] = {}
        if self.pooler is not Pooler.NONE:
            dsn, from_url = url_settings(dsn)  # set as the pooler allows, below
        in_url = {key for key, _ in parse_qsl(dsn.partition("?")[2])} | set(from_url)
        given = {**from_url, **(options.get("server_settings") or {})}
        connection = plan(
            self.pooler,
            {**{k: v for k, v in _DEFAULT_SERVER_SETTINGS.items() if k not in in_url}, **given},
            given,
        )
        options["server_settings"] = connection.startup
        options.update(connection.options)
        shared = dict(options)
        writable_by_default(dsn, options)
        self.connector: AsyncpgConnector = AsyncpgConnector(
            dsn,
            min_size=min_size,
            max_size=max_size,
            pool_options={
                **_command_timeout(command_timeout),
                **{k: v for k, v in connect_kwargs.items() if k in _POOL_ONLY_OPTIONS},
            },
            connect_options=options,
            session_settings=connection.session,
        )
        dialect = PostgresDialect()
        super().__init__(
            self.connector, dialect, description=description, statements=PostgresStatements(dialect)
        )
        direct = direct_url if direct_url is not None else direct_in_url
        self._direct: tuple[str, dict[str, Any]] | None = None
        """The DSN and options of the connections that keep a session (``LISTEN``, the
        liveness lock) when they do not go through the pool's way."""
        if direct:
            direct_dsn = normalize_url(direct)[0]
            direct_options: dict[str, Any] = {
                **{k: v for k, v in shared.items() if k != "statement_cache_size"},
                "server_settings": {"application_name": "durable"},
            }
            writable_by_default(direct_dsn, direct_options)
            self._direct = (direct_dsn, direct_options)
        sessions = self.pooler is not Pooler.TRANSACTION or self._direct is not None
        self._listener = (
            Listener(self._listen_connection, CHANNEL, self.description)
            if self._session_switch("listen", listen, listen_in_url, sessions)
            else None
        )
        self._liveness_on = self._session_switch("liveness", liveness, liveness_in_url, sessions)
        self._liveness: dict[str, LivenessLock] = {}
        """The liveness lock each worker of this store holds, by worker id."""
        self._wakeup: anyio.Event | None = None
        self._flusher = self.connector.held()
        """The connection the group commit's flushes go over."""
        self._claimer = self.connector.held()
        """The connection the claims go over."""
        self._flushes: dict[frozenset[str], sa.Executable] = {}
        """The flush statement for each mix of writes, built when first needed."""
        self._schedule_handlers: list[Callable[[], None]] = []
        self._talk = (
            TalkFeed(self._listen_connection, self.description)
            if self._listener is not None
            else None
        )

    @staticmethod
    def _session_switch(
        name: str, argument: bool | None, in_url: bool | None, sessions: bool
    ) -> bool:
        """Whether ``listen`` or ``liveness`` is on: as chosen (on by default), and off
        without a session to keep them in (a transaction pooler and no direct URL)."""
        on = _chosen(argument, in_url)
        if sessions or not on:
            return on
        if argument is None and in_url is None:
            return False
        raise ConfigurationError(
            f"durable_{name}=on needs a session of its own, which a transaction pooler "
            f"({POOLER_OPTION}=transaction) cannot keep: give {DIRECT_URL_OPTION}=<a URL "
            "straight to PostgreSQL> (percent-encoded), or turn it off"
        )

    def _failed(self, operation: str, exc: BaseException, *, report: bool = True) -> BaseException:
        hint = pooler_hint(driver_error(exc), self.pooler)
        if hint is not None:
            return ConfigurationError(f"{operation} on {self.description}: {hint}")
        return super()._failed(operation, exc, report=report)

    async def _listen_connection(self, timeout: float) -> asyncpg.Connection:
        if self._direct is not None:
            dsn, options = self._direct
            return await asyncpg.connect(dsn, timeout=timeout, **options)
        return await self.connector.connect(timeout)

    async def open(self) -> None:
        """Create the connection pool (connecting ``min_size`` connections now)."""
        quiet_pool_floor()
        await super().open()
        if self._listener is not None:
            self._listener.reopen()
        if self._talk is not None:
            self._talk.reopen()

    async def close(self) -> None:
        """Close the listener connection and the pool."""
        if self._listener is not None:
            await self._listener.close()
        if self._talk is not None:
            await self._talk.close()
        if self._wakeup is not None:
            self._wakeup.set()
        await super().close()

    # -- group commit ---------------------------------------------------------

    async def write_batch(
        self, steps: Sequence[StepWrite], settlements: Sequence[Settlement]
    ) -> tuple[list[bool], list[bool]]:
        """Write these step rows and settlements in one statement, each fenced by its own
        lease; whether each landed, in order (see
        :class:`~durable_core.seams.store.BatchWriter`)."""
        kinds = flush.flush_kinds(steps, settlements)
        statement = self._flushes.get(kinds)
        if statement is None:
            statement = self._flushes[kinds] = flush.flush_statement(kinds)
        params = flush.flush_params(steps, settlements)
        [row] = await self._fetch("write_batch", statement, params, on=self._flusher)
        return flush.landed(row, steps, settlements)

    # -- liveness -------------------------------------------------------------

    @property
    def offers_liveness(self) -> bool:
        """Whether this store's workers hold liveness sessions (``durable_liveness``)."""
        return self._liveness_on

    async def hold_liveness(
        self, worker_id: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Hold ``worker_id``'s liveness lock on a session of its own until cancelled (see
        :mod:`durable_postgres.liveness`); at once when :attr:`offers_liveness` is false."""
        if not self._liveness_on:
            task_status.started()
            return
        lock = self._liveness[worker_id] = LivenessLock(self._listen_connection, self.description)
        try:
            await lock.run(task_status=task_status)
        finally:
            if self._liveness.get(worker_id) is lock:
                del self._liveness[worker_id]

    def worker_session(self, worker_id: str) -> tuple[int | None, datetime | None]:
        """The liveness lock ``worker_id`` holds now and when the server started."""
        lock = self._liveness.get(worker_id)
        if lock is None or lock.held is None:
            return None, None
        return lock.held

    # -- claiming -------------------------------------------------------------

    async def claim(
        self, *, worker_id: str, limit: int, lease_seconds: float, routes: Sequence[Route]
    ) -> list[ClaimedWorkflow]:
        """Lease up to ``limit`` runnable workflows of ``routes``, with their cached steps, in
        one statement.

        A claim from a queue with fleet-wide limits first takes that queue's claim lock
        in the same transaction, so that claims counting the fleet's slots see each
        other's. The first claim also starts listening, before it reads the queue, so no
        enqueue between this claim and the next :meth:`wait_for_work` goes unheard.
        """
        if limit <= 0 or not routes:
            return []
        listener, listening = self._listener, False
        if listener is not None and self.is_open:
            listening = listener.listening() or await listener.listen(_CLAIM_LISTEN_TIMEOUT)
            # This claim sees whatever was enqueued before it, so earlier notifications
            # are spent; those for later enqueues arrive after this point.
            listener.spend()
        params = {
            "worker": worker_id,
            "limit": limit,
            "lease_seconds": float(lease_seconds),
            **self.statements.claim_params(routes, self._key_pivot),
        }
        locked = sorted(route.queue.name for route in routes if route.queue.fleet_limited)
        if locked:
            async with self._transaction("claim") as session:
                await session.fetch(self.statements.serialized, {"locked_queues": locked})
                rows = await session.fetch(self.statements.claim, params)
        else:
            shared = any(route.take < limit for route in routes)
            claim = self.statements.claim if shared else self.statements.plain_claim
            rows = await self._fetch("claim", claim, params, on=self._claimer)
        if listener is not None and listening:
            listener.caught_up()
        # The next claim walks a keyed lane's keys from after the last one served here.
        keys = [row["concurrency_key"] for row in rows if row["concurrency_key"] is not None]
        self._key_pivot = max(keys) if keys else ""
        return [claimed_from_row(row, worker_id, steps=True, crashed=True) for row in rows]

    def watch(self, workflow_id: str) -> Watch:
        """A watch on ``workflow_id``'s stream writes and update replies, woken by
        ``NOTIFY`` (polling when this store does not listen)."""
        if self._talk is None:
            return PollingWatch()
        return self._talk.watch(workflow_id)

    def on_cancel(self, handler: Callable[[str], None]) -> bool:
        """Call ``handler(workflow_id)`` as soon as any process cancels a workflow, from
        the ``LISTEN`` connection the claim opens. False when this store does not listen."""
        if self._listener is None:
            return False
        self._listener.add_handler(CANCEL_CHANNEL, handler)
        return True

    def on_schedule_change(self, handler: Callable[[], None]) -> bool:
        """Call ``handler()`` whenever any process adds, changes, pauses or resumes a schedule,
        and each time the ``LISTEN`` connection the claim opens is (re)opened. False when this
        store does not listen."""
        if self._listener is None:
            return False
        if not self._schedule_handlers:
            self._listener.add_handler(SCHEDULE_CHANNEL, lambda _payload: self._schedules_changed())
            self._listener.add_open_handler(self._schedules_changed)
        self._schedule_handlers.append(handler)
        return True

    def _schedules_changed(self) -> None:
        for handler in self._schedule_handlers:
            handler()

    async def _until_next_due(self, timeout: float) -> float:
        """``timeout``, shortened to when the next sleep ends or delayed start falls due."""
        try:
            [row] = await self._fetch("wait_for_work", self.statements.next_due, {})
        except StoreError:
            return timeout  # the claim loop reports an unreachable database
        seconds = row["seconds"]
        if seconds is None:
            return timeout
        return min(timeout, max(float(seconds), _MIN_WAIT))

    async def wait_for_work(self, timeout: float) -> None:
        """Return on a ``NOTIFY`` since the last claim or wait, when the next scheduled
        workflow (a sleep's end, a retry, a delayed start) falls due, or after ``timeout``.

        A lost ``LISTEN`` connection is never an error here: the wait then simply
        lasts its timeout while the connection is re-opened with backoff.
        """
        self._require_open()
        timeout = await self._until_next_due(timeout)
        if self._listener is not None:
            await self._listener.wait(timeout)
            return
        self._wakeup = anyio.Event()
        with anyio.move_on_after(max(timeout, 0.0)):
            await self._wakeup.wait()
