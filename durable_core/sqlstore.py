"""A portable :class:`~durable_core.store.Store` over SQLAlchemy Core's async engine.

The SQLite and MySQL backends are this class with their own URL handling and
connection settings. It persists everything the engine needs but does not
claim work: ``claim`` raises :class:`ClaimNotSupportedError`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from . import schema
from .errors import (
    ClaimNotSupportedError,
    CorruptRecordError,
    InvalidStateError,
    LeaseLostError,
    SchemaMissingError,
    StoreError,
    StoreUnavailableError,
    WorkflowNotFoundError,
)
from .records import (
    ClaimedWorkflow,
    Lease,
    NewWorkflow,
    StepRecord,
    StepStatus,
    WorkflowRecord,
    WorkflowStatus,
)

wf = schema.workflows
st = schema.workflow_steps

_MISSING_TABLE_MARKERS = ("no such table", "doesn't exist", "does not exist")
_REFUSED_MARKERS = ("access denied", "unknown database", "password authentication failed")


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def translate_error(exc: BaseException, *, operation: str, description: str) -> StoreError:
    """Wrap a driver or SQLAlchemy exception in the matching :class:`StoreError`."""
    text = str(exc)
    lowered = text.lower()
    if any(marker in lowered for marker in _MISSING_TABLE_MARKERS) and "workflow" in lowered:
        return SchemaMissingError(
            f"{operation} on {description} failed: the durable tables are missing. "
            f"Apply them with `durable migrate` or `await store.apply_schema()`. ({text})"
        )
    if any(marker in lowered for marker in _REFUSED_MARKERS):
        return StoreError(
            f"{operation} on {description}: the server refused the connection "
            f"(check the URL's database, user and password): {text}"
        )
    transient = isinstance(exc, OSError | ConnectionError | TimeoutError) or (
        isinstance(exc, sa.exc.DBAPIError)
        and (exc.connection_invalidated or isinstance(exc, sa.exc.OperationalError))
    )
    if transient or isinstance(exc, sa.exc.InterfaceError | sa.exc.TimeoutError):
        return StoreUnavailableError(f"{operation} on {description}: database unavailable: {text}")
    return StoreError(f"{operation} on {description} failed: {text}")


def record_from_row(row: Any) -> WorkflowRecord:
    """Build a :class:`WorkflowRecord` from a row holding the ``workflows`` columns."""
    try:
        status = WorkflowStatus(row.status)
    except ValueError as exc:
        raise CorruptRecordError(
            f"workflow {row.id} has an unknown status {row.status!r} in its row"
        ) from exc
    return WorkflowRecord(
        id=row.id,
        name=row.name,
        status=status,
        input=row.input,
        output=row.output,
        error=row.error,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        run_at=row.run_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        completed_at=row.completed_at,
        locked_by=row.locked_by,
        locked_until=row.locked_until,
    )


def step_from_row(workflow_id: str, row: Any) -> StepRecord:
    """Build a :class:`StepRecord` from a row holding the ``workflow_steps`` columns."""
    try:
        status = StepStatus(row.status)
    except ValueError as exc:
        raise CorruptRecordError(
            f"step {row.step_index} of workflow {workflow_id} has an unknown status {row.status!r}"
        ) from exc
    return StepRecord(
        step_index=row.step_index,
        step_name=row.step_name,
        status=status,
        input=row.input,
        output=row.output,
        error=row.error,
        attempts=row.attempts,
    )


class SQLAlchemyStore:
    """A store over any SQLAlchemy async engine (SQLite, MySQL/MariaDB, PostgreSQL)."""

    def __init__(
        self,
        url: str | sa.URL,
        *,
        description: str | None = None,
        engine_options: dict[str, Any] | None = None,
    ) -> None:
        self._url = sa.make_url(url)
        self._description = description or self._url.render_as_string(hide_password=True)
        self._engine_options = dict(engine_options or {})
        self._engine: AsyncEngine | None = None

    # -- lifecycle ------------------------------------------------------------

    @property
    def description(self) -> str:
        return self._description

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine; available once the store is open."""
        if self._engine is None:
            raise StoreError(f"{self._description} is not open: call `await store.open()` first")
        return self._engine

    def create_engine(self) -> AsyncEngine:
        """Build the engine. Backends override this to add connection settings."""
        return create_async_engine(self._url, **self._engine_options)

    async def open(self) -> None:
        if self._engine is None:
            self._engine = self.create_engine()

    async def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.dispose()

    async def __aenter__(self) -> SQLAlchemyStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def apply_schema(self) -> None:
        async with self._connect("apply_schema", begin=False) as conn:
            await conn.run_sync(schema.metadata.create_all)
            await conn.commit()

    @asynccontextmanager
    async def _connect(
        self, operation: str, *, begin: bool = True
    ) -> AsyncIterator[AsyncConnection]:
        try:
            if begin:
                async with self.engine.begin() as conn:
                    yield conn
            else:
                async with self.engine.connect() as conn:
                    yield conn
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            raise translate_error(exc, operation=operation, description=self._description) from exc

    def _now(self) -> datetime:
        return utcnow()

    # -- enqueue and read side ------------------------------------------------

    async def enqueue(self, workflows: Sequence[NewWorkflow]) -> None:
        if not workflows:
            return
        now = self._now()
        rows = [
            {
                "id": w.id,
                "name": w.name,
                "status": WorkflowStatus.PENDING.value,
                "input": w.input,
                "attempts": 0,
                "max_attempts": w.max_attempts,
                "run_at": now + timedelta(seconds=w.delay_seconds),
                "created_at": now,
                "updated_at": now,
            }
            for w in workflows
        ]
        async with self._connect("enqueue") as conn:
            await conn.execute(wf.insert(), rows)

    async def get_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        async with self._connect("get_workflow", begin=False) as conn:
            row = (await conn.execute(sa.select(wf).where(wf.c.id == workflow_id))).first()
        return None if row is None else record_from_row(row)

    async def list_workflows(
        self,
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
    ) -> list[WorkflowRecord]:
        query = sa.select(wf).order_by(wf.c.created_at.desc(), wf.c.id.desc()).limit(limit)
        if status is not None:
            query = query.where(wf.c.status == status.value)
        if name is not None:
            query = query.where(wf.c.name == name)
        async with self._connect("list_workflows", begin=False) as conn:
            rows = (await conn.execute(query)).all()
        return [record_from_row(row) for row in rows]

    async def load_steps(self, workflow_id: str) -> list[StepRecord]:
        query = sa.select(st).where(st.c.workflow_id == workflow_id).order_by(st.c.step_index)
        async with self._connect("load_steps", begin=False) as conn:
            rows = (await conn.execute(query)).all()
        return [step_from_row(workflow_id, row) for row in rows]

    async def _require_exists(self, conn: AsyncConnection, workflow_id: str) -> str:
        row = (await conn.execute(sa.select(wf.c.status).where(wf.c.id == workflow_id))).first()
        if row is None:
            raise WorkflowNotFoundError(
                f"no workflow with id {workflow_id!r} in {self._description}"
            )
        return str(row.status)

    async def retry_workflow(self, workflow_id: str) -> None:
        now = self._now()
        async with self._connect("retry_workflow") as conn:
            result = await conn.execute(
                wf.update()
                .where(
                    wf.c.id == workflow_id,
                    wf.c.status.in_([WorkflowStatus.FAILED.value, WorkflowStatus.CANCELLED.value]),
                )
                .values(
                    status=WorkflowStatus.PENDING.value,
                    attempts=0,
                    run_at=now,
                    updated_at=now,
                    completed_at=None,
                )
            )
            if result.rowcount == 0:
                current = await self._require_exists(conn, workflow_id)
                raise InvalidStateError(
                    f"workflow {workflow_id} is {current}; only failed or cancelled "
                    "workflows can be retried"
                )

    async def cancel_workflow(self, workflow_id: str) -> None:
        now = self._now()
        async with self._connect("cancel_workflow") as conn:
            result = await conn.execute(
                wf.update()
                .where(
                    wf.c.id == workflow_id,
                    wf.c.status.in_([WorkflowStatus.PENDING.value, WorkflowStatus.RUNNING.value]),
                )
                .values(
                    status=WorkflowStatus.CANCELLED.value,
                    locked_by=None,
                    lock_token=None,
                    locked_until=None,
                    updated_at=now,
                    completed_at=now,
                )
            )
            if result.rowcount == 0:
                current = await self._require_exists(conn, workflow_id)
                raise InvalidStateError(
                    f"workflow {workflow_id} is {current}; only pending or running "
                    "workflows can be cancelled"
                )

    # -- claiming -------------------------------------------------------------

    async def claim(
        self, *, worker_id: str, limit: int, lease_seconds: float
    ) -> list[ClaimedWorkflow]:
        raise ClaimNotSupportedError.for_store(self._description)

    async def wait_for_work(self, timeout: float) -> NoReturn:
        raise ClaimNotSupportedError.for_store(self._description)

    # -- execution side -------------------------------------------------------

    def _holds(self, lease: Lease) -> sa.ColumnElement[bool]:
        return sa.and_(wf.c.id == lease.workflow_id, wf.c.lock_token == lease.token)

    @staticmethod
    def _lost(lease: Lease, what: str) -> LeaseLostError:
        return LeaseLostError(
            f"worker {lease.worker_id} no longer holds workflow {lease.workflow_id}: "
            f"{what} refused (the lease expired and was reclaimed, or the workflow was cancelled)"
        )

    async def acquire(
        self, workflow_id: str, *, worker_id: str, lease_seconds: float, due_only: bool = True
    ) -> ClaimedWorkflow | None:
        now = self._now()
        token = str(uuid.uuid4())
        pending = wf.c.status == WorkflowStatus.PENDING.value
        if due_only:
            pending = sa.and_(pending, wf.c.run_at <= now)
        expired = sa.and_(wf.c.status == WorkflowStatus.RUNNING.value, wf.c.locked_until < now)
        async with self._connect("acquire") as conn:
            result = await conn.execute(
                wf.update()
                .where(wf.c.id == workflow_id, sa.or_(pending, expired))
                .values(
                    status=WorkflowStatus.RUNNING.value,
                    attempts=wf.c.attempts + 1,
                    locked_by=worker_id,
                    lock_token=token,
                    locked_until=now + timedelta(seconds=lease_seconds),
                    updated_at=now,
                )
            )
            if result.rowcount == 0:
                return None
            row = (
                await conn.execute(
                    sa.select(wf.c.name, wf.c.input, wf.c.attempts, wf.c.max_attempts).where(
                        wf.c.id == workflow_id
                    )
                )
            ).one()
        return ClaimedWorkflow(
            id=workflow_id,
            name=row.name,
            input=row.input,
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            lease=Lease(workflow_id=workflow_id, token=token, worker_id=worker_id),
        )

    def _upsert_running_step(
        self, lease: Lease, step_index: int, step_name: str, input: str, now: datetime
    ) -> sa.Executable:
        source = sa.select(
            sa.literal(lease.workflow_id, sa.String(36)),
            sa.literal(step_index, sa.Integer),
            sa.literal(step_name, sa.String(255)),
            sa.literal(StepStatus.RUNNING.value, sa.String(16)),
            sa.literal(input, sa.Text),
            sa.literal(1, sa.Integer),
            sa.literal(now, schema.UTCDateTime()),
        ).where(self._holds(lease))
        columns = [
            "workflow_id",
            "step_index",
            "step_name",
            "status",
            "input",
            "attempts",
            "started_at",
        ]
        dialect = self.engine.dialect.name
        if dialect in ("mysql", "mariadb"):
            my = mysql.insert(st).from_select(columns, source)
            return my.on_duplicate_key_update(
                step_name=my.inserted.step_name,
                status=my.inserted.status,
                input=my.inserted.input,
                output=None,
                error=None,
                attempts=st.c.attempts + 1,
                started_at=my.inserted.started_at,
                completed_at=None,
            )
        module: Any = postgresql if dialect == "postgresql" else sqlite
        ins = module.insert(st).from_select(columns, source)
        upsert: sa.Executable = ins.on_conflict_do_update(
            index_elements=[st.c.workflow_id, st.c.step_index],
            set_={
                "step_name": ins.excluded.step_name,
                "status": ins.excluded.status,
                "input": ins.excluded.input,
                "output": None,
                "error": None,
                "attempts": st.c.attempts + 1,
                "started_at": ins.excluded.started_at,
                "completed_at": None,
            },
        )
        return upsert

    async def start_step(self, lease: Lease, step_index: int, step_name: str, input: str) -> None:
        stmt = self._upsert_running_step(lease, step_index, step_name, input, self._now())
        async with self._connect("start_step") as conn:
            result = await conn.execute(stmt)
        if result.rowcount == 0:
            raise self._lost(lease, f"recording step {step_index} ({step_name})")

    async def _finish_step(
        self, lease: Lease, step_index: int, values: dict[str, Any], operation: str
    ) -> None:
        holds = sa.exists(sa.select(wf.c.id).where(self._holds(lease)))
        stmt = (
            st.update()
            .where(st.c.workflow_id == lease.workflow_id, st.c.step_index == step_index, holds)
            .values(completed_at=self._now(), **values)
        )
        async with self._connect(operation) as conn:
            result = await conn.execute(stmt)
        if result.rowcount == 0:
            raise self._lost(lease, f"{operation} for step {step_index}")

    async def complete_step(self, lease: Lease, step_index: int, output: str) -> None:
        values = {"status": StepStatus.SUCCEEDED.value, "output": output, "error": None}
        await self._finish_step(lease, step_index, values, "complete_step")

    async def fail_step(self, lease: Lease, step_index: int, error: str) -> None:
        values = {"status": StepStatus.FAILED.value, "error": error}
        await self._finish_step(lease, step_index, values, "fail_step")

    async def heartbeat(self, lease: Lease, lease_seconds: float) -> None:
        now = self._now()
        stmt = (
            wf.update()
            .where(self._holds(lease))
            .values(locked_until=now + timedelta(seconds=lease_seconds), updated_at=now)
        )
        async with self._connect("heartbeat") as conn:
            result = await conn.execute(stmt)
        if result.rowcount == 0:
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
        now = self._now()
        values: dict[str, Any] = {
            "status": status.value,
            "output": output,
            "error": error,
            "locked_by": None,
            "lock_token": None,
            "locked_until": None,
            "updated_at": now,
        }
        if status is WorkflowStatus.PENDING:
            values["run_at"] = now + timedelta(seconds=retry_delay_seconds)
        else:
            values["completed_at"] = now
        async with self._connect("settle") as conn:
            result = await conn.execute(wf.update().where(self._holds(lease)).values(**values))
        if result.rowcount == 0:
            raise self._lost(lease, f"settling as {status.value}")
