"""What a store tells its user when the database fails: every message, in one place.

A connector only classifies a driver's exception (:class:`Failure`); the
store turns that into the :class:`~durable_core.errors.StoreError` a user
sees, with the operation, the store and the driver's own words.
"""

from __future__ import annotations

import enum

from ..errors import (
    LeaseLostError,
    SchemaMissingError,
    SchemaOutdatedError,
    SchemaTooNewError,
    StoreError,
    StoreUnavailableError,
    ValueRefusedError,
)
from ..seams.records import Lease
from .schema import SCHEMA_VERSION
from .schema_ops import NOT_ADDITIVE


class Failure(enum.Enum):
    """What kind of failure a driver's exception is."""

    UNAVAILABLE = "unavailable"
    """The server cannot be reached now (refused, dropped, restarting): worth retrying."""
    SCHEMA_MISSING = "schema_missing"
    """The durable tables are not there."""
    CONFLICT = "conflict"
    """The server rolled the transaction back for a conflict with another one (a deadlock,
    a serialization failure): nothing was written; worth retrying."""
    REFUSED = "refused"
    """The server answered but refused this client (credentials, unknown database)."""
    DUPLICATE = "duplicate"
    """A row with that key exists."""
    INVALID = "invalid"
    """The server refused a value the column cannot hold (a NUL in text, text too long, a
    number out of range): bad input, never worth retrying."""
    OTHER = "other"


def describe(exc: BaseException) -> str:
    """``Type: message`` of a driver's exception."""
    return f"{type(exc).__name__}: {exc}"


def store_error(failure: Failure, exc: BaseException, *, operation: str, store: str) -> StoreError:
    """The error a user sees when ``operation`` on ``store`` failed with ``exc`` (a refused
    value is bad input: a :class:`ValueRefusedError`, which nothing retries)."""
    text = describe(exc)
    if failure is Failure.SCHEMA_MISSING:
        return SchemaMissingError(
            f"{operation} on {store} failed: the durable tables are missing. "
            f"Apply them with `durable migrate` or `await store.apply_schema()`. ({text})"
        )
    if failure is Failure.UNAVAILABLE:
        return StoreUnavailableError(f"{operation} on {store}: database unavailable: {text}")
    if failure is Failure.CONFLICT:
        return StoreUnavailableError(
            f"{operation} on {store}: rolled back by a conflict with another transaction, "
            f"nothing written: {text}"
        )
    if failure is Failure.INVALID:
        return ValueRefusedError(f"{operation} on {store}: the database refused a value: {text}")
    if failure is Failure.REFUSED:
        return StoreError(
            f"{operation} on {store}: the server refused the connection "
            f"(check the URL's database, user and password): {text}"
        )
    return StoreError(f"{operation} on {store} failed: {text}")


def not_open(store: str) -> StoreError:
    """An operation on a store that was never opened, or was closed."""
    return StoreError(f"{store} is not open: call `await store.open()` first")


def schema_outdated(store: str, found: int, needed: int) -> SchemaOutdatedError:
    """The database's schema is older than this release reads and writes."""
    return SchemaOutdatedError(
        f"{store} has durable schema version {found}, and this release of durable-core "
        f"needs version {needed}: run `durable migrate` (or `await store.apply_schema()`)"
    )


def schema_too_new(store: str, newer: list[tuple[int, str]]) -> SchemaTooNewError:
    """A newer release migrated the database with a change workers of this one cannot run on
    (``newer``: the versions past this release's, ``(number, description)``)."""
    breaking = ", ".join(
        f"{number} ({description.removeprefix(NOT_ADDITIVE)})"
        for number, description in newer
        if description.startswith(NOT_ADDITIVE)
    )
    return SchemaTooNewError(
        f"{store} has durable schema version {newer[-1][0]}, migrated by a newer release of "
        f"durable-core than this one (version {SCHEMA_VERSION}), and version {breaking} is not "
        "additive: workers of this release cannot run on it; run the release that migrated it"
    )


def schema_missing(store: str) -> SchemaMissingError:
    """The database has none of the durable tables."""
    return SchemaMissingError(
        f"{store} has no durable tables: apply them with `durable migrate` "
        "or `await store.apply_schema()`"
    )


def lease_lost(lease: Lease, what: str) -> LeaseLostError:
    """A fenced write refused because ``lease`` is no longer the workflow's current lease."""
    return LeaseLostError.refused(lease.worker_id, lease.workflow_id, what)
