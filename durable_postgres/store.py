"""``PostgresStore``: the PostgreSQL store and the only claimer, over an asyncpg pool.

Every operation is one statement on a pooled connection (asyncpg prepares and
caches it per connection); SQLAlchemy is used only to apply the shared schema.
Times come from the server clock. Execution-side writes are fenced: they take
effect only while ``workflows.lock_token`` still equals the lease's token.
Enqueueing sends ``NOTIFY durable_workflows`` in the same transaction, and
:meth:`PostgresStore.wait_for_work` wakes on it through a dedicated ``LISTEN``
connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote_plus

import anyio
import asyncpg
import sqlalchemy as sa

from durable_core import schema
from durable_core.errors import (
    CorruptRecordError,
    InvalidDatabaseURLError,
    InvalidStateError,
    LeaseLostError,
    SchemaMissingError,
    StoreError,
    StoreUnavailableError,
    WorkflowNotFoundError,
)
from durable_core.records import (
    ClaimedWorkflow,
    Lease,
    NewWorkflow,
    StepRecord,
    StepStatus,
    WorkflowRecord,
    WorkflowStatus,
)
from durable_core.sqlstore import translate_error

logger = logging.getLogger("durable_postgres")

CHANNEL = "durable_workflows"
"""The ``NOTIFY`` channel enqueueing signals and workers listen on."""

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
_DEFAULT_SERVER_SETTINGS = {"application_name": "durable", "jit": "off"}
# Serializes concurrent apply_schema calls (several workers booting at once).
_SCHEMA_LOCK_KEY = 0x64757261626C65

_LISTEN_BACKOFF_MIN = 0.1
_LISTEN_BACKOFF_MAX = 5.0
_LISTEN_CONNECT_TIMEOUT_MAX = 10.0
_CLAIM_LISTEN_TIMEOUT = 5.0

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    # What asyncpg raises when a query starts on a connection whose server
    # process has just been terminated (the pool then replaces the connection).
    asyncpg.InternalClientError,
)

_WORKFLOW_COLUMNS = (
    "id, name, status, input, output, error, attempts, max_attempts, run_at, created_at, "
    "updated_at, completed_at, locked_by, locked_until"
)
_STEP_COLUMNS = "step_index, step_name, status, input, output, error, attempts"
# The cached steps of workflow ``{id}`` as one JSON array of arrays (NULL when none).
_STEPS_JSON = (
    "(SELECT json_agg(json_build_array(s.step_index, s.step_name, s.status, s.input, s.output, "
    "s.error, s.attempts) ORDER BY s.step_index) FROM workflow_steps s WHERE s.workflow_id = {id})"
)
_LEASE = "lock_token = gen_random_uuid()::text, locked_until = now() + make_interval(secs => $3)"

_ENQUEUE = f"""
WITH ins AS (
    INSERT INTO workflows (id, name, status, input, attempts, max_attempts, run_at,
                           created_at, updated_at)
    SELECT u.id, u.name, 'pending', u.input, 0, u.max_attempts,
           now() + make_interval(secs => u.delay), now(), now()
    FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::float8[])
         AS u(id, name, input, max_attempts, delay)
    RETURNING 1
)
SELECT pg_notify('{CHANNEL}', '') FROM (SELECT 1 FROM ins LIMIT 1) AS any_row
"""

# Expired leases first, then due pending rows: two ordered, limited, locked index
# scans (no OR, no sort), so the cost does not grow with the queue's length.
CLAIM_SQL = f"""
WITH picked AS MATERIALIZED (
    SELECT id FROM (
        SELECT id FROM (
            SELECT id FROM workflows
            WHERE status = 'running' AND locked_until < now()
            ORDER BY locked_until
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ) AS expired
        UNION ALL
        SELECT id FROM (
            SELECT id FROM workflows
            WHERE status = 'pending' AND run_at <= now()
            ORDER BY run_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ) AS due
    ) AS candidates
    LIMIT $2
), claimed AS (
    UPDATE workflows AS w
    SET status = 'running', attempts = w.attempts + 1, locked_by = $1, {_LEASE},
        updated_at = now()
    FROM picked
    WHERE w.id = picked.id
    RETURNING w.id, w.name, w.input, w.attempts, w.max_attempts, w.lock_token
)
SELECT c.id, c.name, c.input, c.attempts, c.max_attempts, c.lock_token,
       {_STEPS_JSON.format(id="c.id")} AS steps
FROM claimed AS c
"""

_ACQUIRE = f"""
UPDATE workflows
SET status = 'running', attempts = attempts + 1, locked_by = $2, {_LEASE}, updated_at = now()
WHERE id = $1
  AND ((status = 'pending' AND (run_at <= now() OR NOT $4::boolean))
       OR (status = 'running' AND locked_until < now()))
RETURNING id, name, input, attempts, max_attempts, lock_token, {_STEPS_JSON.format(id="$1")}
"""

_GET = f"SELECT {_WORKFLOW_COLUMNS} FROM workflows WHERE id = $1"
_LOAD_STEPS = (
    f"SELECT {_STEP_COLUMNS} FROM workflow_steps WHERE workflow_id = $1 ORDER BY step_index"
)

# One statement reports both whether the row changed and, if not, why (its status
# before the statement, or NULL when there is no such row).
_RETRY = f"""
WITH before AS (SELECT status FROM workflows WHERE id = $1),
changed AS (
    UPDATE workflows
    SET status = 'pending', attempts = 0, run_at = now(), updated_at = now(), completed_at = NULL
    WHERE id = $1 AND status IN ('failed', 'cancelled')
    RETURNING pg_notify('{CHANNEL}', '')
)
SELECT (SELECT count(*) FROM changed) AS changed, (SELECT status FROM before) AS status
"""

_CANCEL = """
WITH before AS (SELECT status FROM workflows WHERE id = $1),
changed AS (
    UPDATE workflows
    SET status = 'cancelled', locked_by = NULL, lock_token = NULL, locked_until = NULL,
        updated_at = now(), completed_at = now()
    WHERE id = $1 AND status IN ('pending', 'running')
    RETURNING 1
)
SELECT (SELECT count(*) FROM changed) AS changed, (SELECT status FROM before) AS status
"""

# Step writes hold the workflow row in share mode for the statement, so a
# concurrent reclaim (FOR UPDATE) either happened before and fails the token
# check, or skips the row until the write commits.
_HELD = "WITH lease AS (SELECT id FROM workflows WHERE id = $1 AND lock_token = $2 FOR SHARE)"

_START_STEP = f"""
{_HELD}
INSERT INTO workflow_steps (workflow_id, step_index, step_name, status, input, attempts,
                            started_at)
SELECT lease.id, $3, $4, 'running', $5, 1, now() FROM lease
ON CONFLICT (workflow_id, step_index) DO UPDATE
SET step_name = excluded.step_name, status = excluded.status, input = excluded.input,
    output = NULL, error = NULL, attempts = workflow_steps.attempts + 1,
    started_at = excluded.started_at, completed_at = NULL
RETURNING 1
"""

_COMPLETE_STEP = f"""
{_HELD}
UPDATE workflow_steps AS s
SET status = 'succeeded', output = $4, error = NULL, completed_at = now()
FROM lease
WHERE s.workflow_id = lease.id AND s.step_index = $3
RETURNING 1
"""

_FAIL_STEP = f"""
{_HELD}
UPDATE workflow_steps AS s
SET status = 'failed', error = $4, completed_at = now()
FROM lease
WHERE s.workflow_id = lease.id AND s.step_index = $3
RETURNING 1
"""

_HEARTBEAT = """
UPDATE workflows SET locked_until = now() + make_interval(secs => $3), updated_at = now()
WHERE id = $1 AND lock_token = $2
RETURNING 1
"""

_RELEASE = "locked_by = NULL, lock_token = NULL, locked_until = NULL, updated_at = now()"

_SETTLE_PENDING = f"""
UPDATE workflows
SET status = 'pending', output = $3, error = $4, run_at = now() + make_interval(secs => $5),
    {_RELEASE}
WHERE id = $1 AND lock_token = $2
RETURNING 1
"""

_SETTLE_FINAL = f"""
UPDATE workflows
SET status = $5, output = $3, error = $4, completed_at = now(), {_RELEASE}
WHERE id = $1 AND lock_token = $2
RETURNING 1
"""


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
    try:
        parsed = sa.make_url(dsn)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise InvalidDatabaseURLError(f"malformed PostgreSQL URL: {exc}") from None
    shown = sa.URL.create(
        "postgresql",
        parsed.username,
        None,
        parsed.host,
        parsed.port,
        parsed.database,
        parsed.query,
    ).render_as_string(hide_password=False)
    return dsn, f"PostgreSQL {unquote_plus(shown)}"


_LISTEN_OPTION = "durable_listen"
_OFF = frozenset({"off", "false", "0", "no"})
_ON = frozenset({"on", "true", "1", "yes"})


def _pop_listen_option(dsn: str) -> tuple[str, bool]:
    """Remove ``durable_listen=on|off`` from the DSN's query; return ``(dsn, listen)``."""
    base, sep, query = dsn.partition("?")
    if not sep:
        return dsn, True
    listen = True
    kept = []
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key != _LISTEN_OPTION:
            kept.append(part)
        elif value.lower() in _OFF:
            listen = False
        elif value.lower() not in _ON:
            raise InvalidDatabaseURLError(
                f"{_LISTEN_OPTION}={value!r} in the PostgreSQL URL: use on or off"
            )
    return base + ("?" + "&".join(kept) if kept else ""), listen


def _status(row_id: str, value: str) -> WorkflowStatus:
    try:
        return WorkflowStatus(value)
    except ValueError as exc:
        raise CorruptRecordError(
            f"workflow {row_id} has an unknown status {value!r} in its row"
        ) from exc


def _record(row: asyncpg.Record) -> WorkflowRecord:
    return WorkflowRecord(
        id=row[0],
        name=row[1],
        status=_status(row[0], row[2]),
        input=row[3],
        output=row[4],
        error=row[5],
        attempts=row[6],
        max_attempts=row[7],
        run_at=row[8],
        created_at=row[9],
        updated_at=row[10],
        completed_at=row[11],
        locked_by=row[12],
        locked_until=row[13],
    )


def _step(workflow_id: str, values: Sequence[Any]) -> StepRecord:
    index, name, status, input, output, error, attempts = values
    try:
        step_status = StepStatus(status)
    except ValueError as exc:
        raise CorruptRecordError(
            f"step {index} of workflow {workflow_id} has an unknown status {status!r}"
        ) from exc
    return StepRecord(index, name, step_status, input, output, error, attempts)


def _inline_steps(workflow_id: str, steps_json: str | None) -> tuple[StepRecord, ...] | None:
    if steps_json is None:
        return ()
    try:
        return tuple(_step(workflow_id, values) for values in json.loads(steps_json))
    except CorruptRecordError:
        # Claiming must not fail for one bad row: the executor then loads the steps
        # itself and the corruption is settled on that workflow alone.
        return None


def _claimed(row: asyncpg.Record, worker_id: str) -> ClaimedWorkflow:
    workflow_id = row[0]
    return ClaimedWorkflow(
        id=workflow_id,
        name=row[1],
        input=row[2],
        attempts=row[3],
        max_attempts=row[4],
        lease=Lease(workflow_id=workflow_id, token=row[5], worker_id=worker_id),
        steps=_inline_steps(workflow_id, row[6]),
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's ``reset`` hook: nothing to undo.

    asyncpg's default reset sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL`` on every release, one more round trip per statement. Pooled
    connections here only ever run single statements (no SET, LISTEN, cursors or
    session locks; ``LISTEN`` has its own connection), and asyncpg still rolls back
    a transaction left open.
    """


def _driver_error(exc: BaseException) -> BaseException:
    """The asyncpg (or OS) exception under a SQLAlchemy wrapper, else ``exc`` itself."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        return exc.orig.__cause__ or exc.orig
    return exc


class PostgresStore:
    """Workflows in PostgreSQL: a :class:`~durable_core.store.Store` and the ``Claimer``.

    ``url`` is ``postgresql://user:password@host:5432/dbname`` (``postgres://`` and
    ``postgresql+asyncpg://`` work too; ``?host=/socket/dir`` reaches a unix
    socket). ``min_size``/``max_size`` bound the pool; other keyword arguments go
    to :func:`asyncpg.create_pool` and :func:`asyncpg.connect`. ``listen=False``
    (or ``?durable_listen=off`` in the URL) turns ``LISTEN`` off: workers then
    find new work by polling alone.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        listen: bool | None = None,
        **connect_kwargs: Any,
    ) -> None:
        self._dsn, self._description = normalize_url(url)
        self._dsn, listen_in_url = _pop_listen_option(self._dsn)
        self._listen_enabled = listen_in_url if listen is None else listen
        self._min_size = min_size
        self._max_size = max_size
        self._pool_options = {k: v for k, v in connect_kwargs.items() if k in _POOL_ONLY_OPTIONS}
        self._pool_options.setdefault("reset", _keep_session)
        options = {k: v for k, v in connect_kwargs.items() if k not in _POOL_ONLY_OPTIONS}
        options["server_settings"] = {
            **_DEFAULT_SERVER_SETTINGS,
            **(options.get("server_settings") or {}),
        }
        self._connect_options = options
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._listener_lock: anyio.Lock | None = None
        self._listen_retry_at = 0.0
        self._listen_backoff = _LISTEN_BACKOFF_MIN
        self._notified = False
        # Set when the listener was lost: notifications may have gone unheard.
        self._missed = False
        self._wakeup: anyio.Event | None = None

    # -- lifecycle ------------------------------------------------------------

    @property
    def description(self) -> str:
        return self._description

    async def open(self) -> None:
        """Create the connection pool (connecting ``min_size`` connections now)."""
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                **self._pool_options,
                **self._connect_options,
            )
        except Exception as exc:
            raise self._translate(exc, "open") from exc

    async def close(self) -> None:
        """Close the listener connection and the pool."""
        listener, self._listener = self._listener, None
        pool, self._pool = self._pool, None
        self._listen_retry_at, self._listen_backoff = 0.0, _LISTEN_BACKOFF_MIN
        if self._wakeup is not None:
            self._wakeup.set()
        if listener is not None:
            await _close_connection(listener)
        if pool is not None:
            try:
                with anyio.fail_after(10):
                    await pool.close()
            except Exception:  # a hung or broken connection: drop them all
                pool.terminate()

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def apply_schema(self) -> None:
        """Create the shared schema (``durable_core.schema.metadata``) if it is missing."""
        from sqlalchemy.ext.asyncio import create_async_engine
        from sqlalchemy.pool import NullPool

        self._require_pool()

        async def connect() -> asyncpg.Connection:
            return await asyncpg.connect(self._dsn, **self._connect_options)

        engine = create_async_engine(
            "postgresql+asyncpg://", async_creator=connect, poolclass=NullPool
        )
        try:
            async with engine.begin() as conn:
                await conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK_KEY})"))
                await conn.run_sync(schema.metadata.create_all)
        except Exception as exc:
            raise self._translate(exc, "apply_schema") from exc
        finally:
            await engine.dispose()

    def _require_pool(self) -> asyncpg.Pool:
        pool = self._pool
        if pool is None:
            raise StoreError(f"{self._description} is not open: call `await store.open()` first")
        return pool

    def _translate(self, exc: BaseException, operation: str) -> StoreError:
        """Wrap a driver, OS or SQLAlchemy exception in the matching :class:`StoreError`."""
        cause = _driver_error(exc)
        if isinstance(cause, asyncpg.UndefinedTableError) and "workflow" in str(cause):
            return SchemaMissingError(
                f"{operation} on {self._description} failed: the durable tables are missing. "
                f"Apply them with `durable migrate` or `await store.apply_schema()`. ({cause})"
            )
        text = f"{type(cause).__name__}: {cause}"
        if isinstance(cause, _UNAVAILABLE):
            return StoreUnavailableError(
                f"{operation} on {self._description}: database unavailable: {text}"
            )
        if isinstance(exc, sa.exc.SQLAlchemyError) and cause is exc:
            return translate_error(exc, operation=operation, description=self._description)
        return StoreError(f"{operation} on {self._description} failed: {text}")

    async def _fetch(self, operation: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        pool = self._require_pool()
        try:
            rows: list[asyncpg.Record] = await pool.fetch(sql, *args)
        except Exception as exc:
            raise self._translate(exc, operation) from exc
        return rows

    async def _fetchrow(self, operation: str, sql: str, *args: Any) -> asyncpg.Record | None:
        pool = self._require_pool()
        try:
            row: asyncpg.Record | None = await pool.fetchrow(sql, *args)
        except Exception as exc:
            raise self._translate(exc, operation) from exc
        return row

    async def _fetchval(self, operation: str, sql: str, *args: Any) -> Any:
        pool = self._require_pool()
        try:
            return await pool.fetchval(sql, *args)
        except Exception as exc:
            raise self._translate(exc, operation) from exc

    # -- enqueue and read side ------------------------------------------------

    async def enqueue(self, workflows: Sequence[NewWorkflow]) -> None:
        """Insert pending workflows and ``NOTIFY`` workers: one statement, one transaction."""
        if not workflows:
            return
        await self._fetch(
            "enqueue",
            _ENQUEUE,
            [w.id for w in workflows],
            [w.name for w in workflows],
            [w.input for w in workflows],
            [w.max_attempts for w in workflows],
            [float(w.delay_seconds) for w in workflows],
        )

    async def get_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """One workflow row, or ``None``."""
        row = await self._fetchrow("get_workflow", _GET, workflow_id)
        return None if row is None else _record(row)

    async def list_workflows(
        self,
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
    ) -> list[WorkflowRecord]:
        """The newest workflows first, optionally filtered by status and name."""
        conditions: list[str] = []
        args: list[Any] = []
        if status is not None:
            args.append(status.value)
            conditions.append(f"status = ${len(args)}")
        if name is not None:
            args.append(name)
            conditions.append(f"name = ${len(args)}")
        args.append(limit)
        where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
        sql = (
            f"SELECT {_WORKFLOW_COLUMNS} FROM workflows {where}"
            f"ORDER BY created_at DESC, id DESC LIMIT ${len(args)}"
        )
        rows = await self._fetch("list_workflows", sql, *args)
        return [_record(row) for row in rows]

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        """Every step of a workflow, by index."""
        rows = await self._fetch("load_steps", _LOAD_STEPS, workflow_id)
        return [_step(workflow_id, row) for row in rows]

    async def retry_workflow(self, workflow_id: str) -> None:
        """Put a failed or cancelled workflow back to pending (and wake the workers)."""
        row = await self._fetchrow("retry_workflow", _RETRY, workflow_id)
        self._check_changed(workflow_id, row, "only failed or cancelled workflows can be retried")

    async def cancel_workflow(self, workflow_id: str) -> None:
        """Cancel a pending or running workflow; its holder loses the lease."""
        row = await self._fetchrow("cancel_workflow", _CANCEL, workflow_id)
        self._check_changed(workflow_id, row, "only pending or running workflows can be cancelled")

    def _check_changed(self, workflow_id: str, row: asyncpg.Record | None, rule: str) -> None:
        assert row is not None  # the statement always returns one row
        if row[0]:
            return
        if row[1] is None:
            raise WorkflowNotFoundError(
                f"no workflow with id {workflow_id!r} in {self._description}"
            )
        raise InvalidStateError(f"workflow {workflow_id} is {row[1]}; {rule}")

    # -- claiming -------------------------------------------------------------

    async def claim(
        self, *, worker_id: str, limit: int, lease_seconds: float
    ) -> list[ClaimedWorkflow]:
        """Lease up to ``limit`` runnable workflows, with their cached steps, in one statement.

        The first claim also starts listening, before it reads the queue, so no
        enqueue between this claim and the next :meth:`wait_for_work` goes unheard.
        """
        if limit <= 0:
            return []
        listening = self._listen_enabled and (
            self._listening() or await self._listen(_CLAIM_LISTEN_TIMEOUT)
        )
        # This claim sees whatever was enqueued before it, so earlier notifications
        # are spent; those for later enqueues arrive after this point.
        self._notified = False
        rows = await self._fetch("claim", CLAIM_SQL, worker_id, limit, float(lease_seconds))
        if listening and self._listening():
            self._missed = False
        return [_claimed(row, worker_id) for row in rows]

    async def wait_for_work(self, timeout: float) -> None:
        """Return on a ``NOTIFY`` since the last claim or wait, or after ``timeout`` seconds.

        The ``LISTEN`` connection is opened on first use and re-opened (with
        backoff) when lost; a wait that re-opens it returns at once, since
        notifications sent while nobody listened are gone. A lost connection is
        never an error here: the wait then simply lasts its timeout.
        """
        self._require_pool()
        if not self._listen_enabled:
            self._wakeup = anyio.Event()
            with anyio.move_on_after(max(timeout, 0.0)):
                await self._wakeup.wait()
            return
        deadline = anyio.current_time() + max(timeout, 0.0)
        while True:
            now = anyio.current_time()
            if not self._listening():
                await self._listen(min(max(deadline - now, 1.0), _LISTEN_CONNECT_TIMEOUT_MAX))
            if self._notified or (self._missed and self._listening()):
                self._notified = self._missed = False
                return
            now = anyio.current_time()
            if now >= deadline or self._pool is None:
                return
            wake_at = deadline if self._listening() else min(deadline, self._listen_retry_at)
            self._wakeup = anyio.Event()
            with anyio.move_on_after(wake_at - now):
                await self._wakeup.wait()

    def _listening(self) -> bool:
        return self._listener is not None and not self._listener.is_closed()

    def _on_notify(self, _conn: object, _pid: int, _channel: str, _payload: object) -> None:
        self._notified = True
        if self._wakeup is not None:
            self._wakeup.set()

    def _on_listener_closed(self, conn: object) -> None:
        if conn is self._listener:
            self._missed = True
        if self._wakeup is not None:
            self._wakeup.set()

    async def _listen(self, timeout: float) -> bool:
        """Open the ``LISTEN`` connection unless backing off; True when it is open."""
        if self._listener_lock is None:
            self._listener_lock = anyio.Lock()
        async with self._listener_lock:
            if self._listening():
                return True
            if self._pool is None or anyio.current_time() < self._listen_retry_at:
                return False
            stale, self._listener = self._listener, None
            if stale is not None:
                self._missed = True
                stale.terminate()
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=timeout, **self._connect_options)
                await conn.add_listener(CHANNEL, self._on_notify)
            except Exception as exc:
                if conn is not None:
                    conn.terminate()
                logger.warning(
                    "cannot listen for new work on %s (retrying in %.1fs; polling meanwhile): %s",
                    self._description,
                    self._listen_backoff,
                    exc,
                )
                self._listen_retry_at = anyio.current_time() + self._listen_backoff
                self._listen_backoff = min(self._listen_backoff * 2, _LISTEN_BACKOFF_MAX)
                return False
            if self._pool is None:  # closed while connecting
                await _close_connection(conn)
                return False
            self._listener = conn
            conn.add_termination_listener(self._on_listener_closed)
            self._listen_backoff = _LISTEN_BACKOFF_MIN
            return True

    # -- execution side (fenced by the lease token) ---------------------------

    @staticmethod
    def _lost(lease: Lease, what: str) -> LeaseLostError:
        return LeaseLostError(
            f"worker {lease.worker_id} no longer holds workflow {lease.workflow_id}: "
            f"{what} refused (the lease expired and was reclaimed, or the workflow was cancelled)"
        )

    async def acquire(
        self, workflow_id: str, *, worker_id: str, lease_seconds: float, due_only: bool = True
    ) -> ClaimedWorkflow | None:
        """Lease one runnable workflow by id, with its cached steps, or return ``None``."""
        row = await self._fetchrow(
            "acquire", _ACQUIRE, workflow_id, worker_id, float(lease_seconds), due_only
        )
        return None if row is None else _claimed(row, worker_id)

    async def start_step(self, lease: Lease, step_index: int, step_name: str, input: str) -> None:
        """Record a step as running (insert, or reset an earlier run); fenced by ``lease``."""
        done = await self._fetchval(
            "start_step", _START_STEP, lease.workflow_id, lease.token, step_index, step_name, input
        )
        if done is None:
            raise self._lost(lease, f"recording step {step_index} ({step_name})")

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        """Record a step's output as succeeded; fenced by ``lease``."""
        done = await self._fetchval(
            "complete_step", _COMPLETE_STEP, lease.workflow_id, lease.token, step_index, output
        )
        if done is None:
            raise self._lost(lease, f"complete_step for step {step_index}")

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        """Record a step's error as failed; fenced by ``lease``."""
        done = await self._fetchval(
            "fail_step", _FAIL_STEP, lease.workflow_id, lease.token, step_index, error
        )
        if done is None:
            raise self._lost(lease, f"fail_step for step {step_index}")

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        """Extend the lease to ``lease_seconds`` from the server's now."""
        done = await self._fetchval(
            "heartbeat", _HEARTBEAT, lease.workflow_id, lease.token, float(lease_seconds)
        )
        if done is None:
            raise self._lost(lease, "renewing the lease")

    async def settle(
        self,
        lease: Lease,
        status: WorkflowStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        retry_delay_seconds: float = 0.0,
    ) -> None:
        """End the attempt as ``status`` and release the lease; fenced by ``lease``."""
        last: float | str
        if status is WorkflowStatus.PENDING:
            sql, last = _SETTLE_PENDING, float(retry_delay_seconds)
        else:
            sql, last = _SETTLE_FINAL, status.value
        done = await self._fetchval(
            "settle", sql, lease.workflow_id, lease.token, output, error, last
        )
        if done is None:
            raise self._lost(lease, f"settling as {status.value}")


async def _close_connection(conn: asyncpg.Connection) -> None:
    try:
        await conn.close(timeout=5)
    except Exception:
        conn.terminate()
