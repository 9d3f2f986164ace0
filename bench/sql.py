"""The statements the floor issues: compiled from the store's own, so the floor follows its SQL.

Nothing here is copied: when the shared rules (``durable_core.sql.statements``)
or the PostgreSQL ones (``durable_postgres.dialect``) change a statement, the
floor issues the changed statement too. Each is a
:class:`~durable_postgres.connector.Compiled`: ``.sql`` with its parameters in
``.names`` order (``.args(params)`` orders a dict of them).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import asyncpg

from durable_core.definitions.queues import DEFAULT_QUEUE, Queue, Route
from durable_core.definitions.registry import Workflow
from durable_core.seams.records import NewWorkflow
from durable_postgres import store as _store
from durable_postgres.connector import Compiled, compile_statement
from durable_postgres.dialect import CHANNEL, PostgresStatements

_statements = PostgresStatements()
ENQUEUE: Compiled = compile_statement(_statements.enqueue)
CLAIM: Compiled = compile_statement(_statements.plain_claim)
"""The claim a worker sends when no queue it serves has limits."""
QUOTA_CLAIM: Compiled = compile_statement(_statements.claim)
"""The claim within queue limits (after the queue's lock)."""
START_STEP: Compiled = compile_statement(_statements.start_step)
COMPLETE_STEP: Compiled = compile_statement(_statements.complete_step)
SETTLE_FINAL: Compiled = compile_statement(_statements.settle_final)
SERVER_SETTINGS: dict[str, str] = dict(_store._DEFAULT_SERVER_SETTINGS)

_defaults = inspect.signature(_store.PostgresStore.__init__).parameters
POOL_MIN: int = _defaults["min_size"].default
"""The framework store's default pool bounds; the floor's pool uses the same."""
POOL_MAX: int = _store._pool_size(None, POOL_MIN)

__all__ = ["CHANNEL", "CLAIM", "COMPLETE_STEP", "ENQUEUE", "SETTLE_FINAL", "START_STEP"]


SERIALIZED: Compiled = compile_statement(_statements.serialized)
"""Taking the claim locks of queues with fleet limits, before such a claim."""


def claim_for(queue: Queue | None) -> Compiled:
    """The claim statement the store sends for a worker serving ``queue``."""
    return QUOTA_CLAIM if queue is not None and queue.fleet_limited else CLAIM


def claim_params(limit: int, queue: Queue | None = None) -> dict[str, Any]:
    """The routes of a worker serving every workflow of ``bench.app`` on ``queue`` (the
    default queue, without limits, if none)."""
    from bench import app

    names = tuple(sorted(w.name for w in vars(app).values() if isinstance(w, Workflow)))
    route = Route(queue or Queue(DEFAULT_QUEUE), names, limit)
    return dict(_statements.claim_params([route]))


def enqueue_params(rows: Sequence[NewWorkflow]) -> list[dict[str, Any]]:
    """The store's parameter sets of :data:`ENQUEUE` for ``rows``."""
    return [dict(params) for params in _statements.enqueue_params(rows)]


def positional(statement: Compiled, **params: Any) -> list[Any]:
    """The arguments of ``statement`` in its parameter order."""
    return statement.args(params)


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Release a pooled connection without asyncpg's reset query.

    By default asyncpg sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL`` each time a connection goes back to the pool: one
    more round trip per statement. The floor sends the store's statements and
    nothing else.
    """


def pool_options(application_name: str) -> dict[str, Any]:
    """Keyword arguments for ``asyncpg.create_pool``: the framework's pool bounds, no reset."""
    return {
        "min_size": POOL_MIN,
        "max_size": POOL_MAX,
        "reset": _no_reset,
        "server_settings": {**SERVER_SETTINGS, "application_name": application_name},
    }
