"""The store's roles for talking to running workflows (schema version 7): streams and
updates. Part of the seam of :mod:`durable_core.seams.store` (which re-exports them); every SQL
store has both, and the client checks for each with ``isinstance``."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError, TalkNotSupportedError
from .records import BodyCall, Lease, StreamPage, UpdateRecord


def _lacks(store: Any, role: str, what: str) -> TalkNotSupportedError:
    description = getattr(store, "description", type(store).__name__)
    return TalkNotSupportedError(f"{description} keeps no {what} (it is not a {role} store)")


def updates_of(store: Any) -> Updates:
    """``store`` as an :class:`Updates`, or a
    :class:`~durable_core.errors.TalkNotSupportedError`."""
    if not isinstance(store, Updates):
        raise _lacks(store, "Updates", "updates")
    return store


def streams_of(store: Any) -> Streams:
    """``store`` as a :class:`Streams`, or a
    :class:`~durable_core.errors.TalkNotSupportedError`."""
    if not isinstance(store, Streams):
        raise _lacks(store, "Streams", "streams")
    return store


@runtime_checkable
class Watch(Protocol):
    """What a stream reader or an update caller waits on between reads (schema version 7)."""

    notified: bool
    """Whether a write wakes it (``NOTIFY``); else each wait lasts its timeout (polling)."""

    async def wait(self, timeout: float) -> None:
        """Return on a stream write or an update reply of its workflow since the last wait
        (where the store can tell), or after ``timeout`` seconds."""
        ...

    async def close(self) -> None:
        """Stop watching."""
        ...


@runtime_checkable
class Streams(Protocol):
    """A store that keeps each workflow's streams: ordered values per key (schema version 7)."""

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
        """Append ``value`` (``None`` closes the key) at ``key``'s next offset and record the
        writing call's step (its output the offset), in one transaction fenced by ``lease``;
        the offset. A closed key raises :class:`~durable_core.errors.StreamClosedError`."""
        ...

    async def read_stream(
        self, workflow_id: str, key: str, offset: int = 0, limit: int = 1000
    ) -> StreamPage:
        """At most ``limit`` values of ``key`` from ``offset`` on, and whether it is closed."""
        ...

    def watch(self, workflow_id: str) -> Watch:
        """A :class:`Watch` of ``workflow_id``'s stream writes and update replies."""
        ...


@runtime_checkable
class Updates(Protocol):
    """A store that carries callers' updates to running workflows and the bodies' replies
    (schema version 7). Each update is keyed by its workflow and ``update_id``."""

    async def send_update(
        self, workflow_id: str, update_id: str, name: str, payload: str
    ) -> UpdateRecord:
        """Add the update unless its id is there, and wake the workflow if it waits on
        ``name``; the update as it stands. Raises
        :class:`~durable_core.errors.WorkflowNotFoundError` for an unknown workflow,
        :class:`~durable_core.errors.UpdateConflictError` for an id sent with another name
        or payload, :class:`~durable_core.errors.UpdateNotHandledError` for a new update
        to a workflow that has ended."""
        ...

    async def get_update(self, workflow_id: str, update_id: str) -> UpdateRecord | None:
        """The update, or ``None``."""
        ...

    async def next_update(self, workflow_id: str, name: str) -> UpdateRecord | None:
        """The oldest pending update of ``name``, or ``None``."""
        ...

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
        """Mark the pending update taken and record the receiving step with ``output``, in
        one transaction fenced by ``lease``; False (nothing written) if it is not pending."""
        ...

    async def reject_update(self, lease: Lease, update_id: str, error: str) -> None:
        """Mark the pending update rejected with ``error`` (fenced by ``lease``)."""
        ...

    def watch(self, workflow_id: str) -> Watch:
        """A :class:`Watch` of ``workflow_id``'s stream writes and update replies."""
        ...

    async def reply_update(
        self, lease: Lease, update_id: str, reply: str, *, call: BodyCall | None = None
    ) -> None:
        """Record ``reply`` to the taken update (fenced by ``lease``; with ``call``, the body's
        call under the same lease, recorded in the same transaction); a second reply to the
        same update changes nothing."""
        ...


MAX_KEY = 255
"""The longest stream key."""


def check_key(key: Any) -> str:
    """``key`` if it names a stream, else a :class:`ConfigurationError` saying why."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise ConfigurationError(
            f"a stream key is a non-empty string of at most {MAX_KEY} characters, got {key!r:.80}"
        )
    return key
