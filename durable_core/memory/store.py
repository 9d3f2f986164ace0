"""``MemoryStore``: every role and capability of the store seam, in plain Python."""

from __future__ import annotations

from .retention import PruningOperations
from .tables import Tables


class MemoryStore(PruningOperations):
    """A store that keeps everything in this process's memory: dicts guarded by one lock,
    no SQL and no database. The fastest store for unit tests with
    :class:`~durable_core.testing.WorkflowRunner`; it plays every role of
    :class:`~durable_core.seams.store.Store` and offers streams, updates, debounce,
    attributes, schedule overlaps, compensations, erasure, pruning, the worker registry
    and the operator's queries, under the same rules as the SQL stores.

    It cannot claim work for a worker (a worker refuses it, as it refuses SQLite), and
    it cannot run a transaction step on its own database, having none: give such a step
    ``database=AppDatabase(url)``. What it holds lives as long as the object: a second
    instance built with ``MemoryStore(tables=store.tables)`` shares it (and its lock).
    """

    def __init__(self, *, tables: Tables | None = None, description: str | None = None) -> None:
        super().__init__(tables=tables, description=description)

    async def tamper(
        self,
        table: str,
        column: str,
        value: str | None,
        *,
        workflow_id: str,
        step_index: int | None = None,
    ) -> None:
        """Write a raw value into one column of a stored row behind the rules' back (a
        :class:`~durable_core.contract.Tamper`: the contract suite corrupts rows with it)."""
        with self.tables.lock:
            if table == "workflows":
                row = self.tables.workflows[workflow_id]
            elif table == "workflow_steps" and step_index is not None:
                row = self.tables.steps[workflow_id][step_index]
            else:
                raise ValueError(f"cannot tamper with {table!r} (step_index {step_index!r})")
            if column not in row:
                raise ValueError(f"{table} has no column {column!r}")
            row[column] = value
