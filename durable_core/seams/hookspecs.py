"""The hook specifications: what a backend implements to be found, and what an observer
can watch (the pytest way: specs in a module of their own, implemented with
:data:`hookimpl`, called through pluggy's hook caller by :mod:`durable_core.seams.plugins`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pluggy

from .events import AttemptEvent
from .store import EmbeddedDatabase, Store

PROJECT = "durable_core"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class StoreSpec:
    """Hooks a backend implements to be found by database URL."""

    @hookspec(firstresult=True)
    def durable_store_from_url(self, url: str) -> Store | None:
        """Return a (not yet opened) store for ``url``, or ``None`` if the URL is not yours.

        The store may play only some of the roles of :mod:`durable_core.seams.roles`: the
        code given it refuses it, naming the role, when it lacks one that code needs."""

    @hookspec
    def durable_store_url_forms(self) -> list[str]:  # type: ignore[empty-body]
        """The URL forms this backend accepts, for error messages (e.g. ``sqlite:///path``)."""

    @hookspec(firstresult=True)
    def durable_embedded_database(self, data_dir: str | None) -> EmbeddedDatabase | None:
        """A database to start when no URL is given (the PostgreSQL backend ships one)."""


class HeaderSpec:
    """What an observer adds to each workflow it sees started."""

    @hookspec
    def durable_workflow_headers(
        self, workflow_id: str, workflow_name: str
    ) -> Mapping[str, str] | None:
        """Headers to store with a workflow being started (a trace context, say), handed
        to ``durable_workflow_claimed`` when a worker claims it. Called in the starter's
        context; the mappings of all observers are merged."""


class ObserverSpec:
    """Events an observer can watch. Return values are ignored.

    A hook about one attempt of a workflow receives it as ``attempt``, an
    :class:`~durable_core.seams.events.AttemptEvent` (``worker_id``, ``workflow_id``,
    ``workflow_name``, ``attempts``, ``max_attempts``), besides what is particular to it."""

    @hookspec
    def durable_workflow_enqueued(
        self, workflow_id: str, workflow_name: str, max_attempts: int
    ) -> None:
        """A workflow row was written as pending."""

    @hookspec
    def durable_workflow_claimed(
        self, attempt: AttemptEvent, queue_wait: float | None, headers: Mapping[str, str]
    ) -> None:
        """A worker took the lease on a workflow and is about to run its body.

        ``queue_wait`` is how many seconds the workflow was due before this claim
        (``None`` when the claim took it over from a crashed attempt); ``headers`` are
        those stored when it was started (see :meth:`durable_workflow_headers`)."""

    @hookspec
    def durable_step_started(
        self, attempt: AttemptEvent, step_index: int, step_name: str, step_attempt: int
    ) -> None:
        """A step body is about to run (not fired when a step replays from cache);
        ``step_attempt`` counts its tries, from 1 (more under a step retry policy)."""

    @hookspec
    def durable_step_succeeded(
        self, attempt: AttemptEvent, step_index: int, step_name: str, cached: bool
    ) -> None:
        """A step returned; ``cached`` is true when its output came from the history."""

    @hookspec
    def durable_step_failed(
        self, attempt: AttemptEvent, step_index: int, step_name: str, error: BaseException
    ) -> None:
        """A step body raised."""

    @hookspec
    def durable_retry_scheduled(
        self, attempt: AttemptEvent, error: dict[str, Any], delay_seconds: float
    ) -> None:
        """An attempt failed and the workflow will run again after ``delay_seconds``."""

    @hookspec
    def durable_workflow_succeeded(self, attempt: AttemptEvent, output: str) -> None:
        """The workflow settled as succeeded with this output JSON."""

    @hookspec
    def durable_workflow_failed(self, attempt: AttemptEvent, error: dict[str, Any]) -> None:
        """The workflow settled as failed; no further attempt will run."""

    @hookspec
    def durable_workflow_waiting(
        self, attempt: AttemptEvent, waiting_for: str, wake_at: datetime | None
    ) -> None:
        """The workflow suspended, releasing its lease and slot, until ``waiting_for``
        (``sleep``, ``message:<topic>``, ``child:<id>``) happens or ``wake_at`` passes."""

    @hookspec
    def durable_workflow_cancelled(self, attempt: AttemptEvent) -> None:
        """A running workflow was cancelled: its body was stopped and it will not run again."""

    @hookspec
    def durable_lease_lost(self, attempt: AttemptEvent) -> None:
        """The worker lost its lease; another worker owns the workflow now."""

    @hookspec
    def durable_attempt_unsettled(self, attempt: AttemptEvent, error: BaseException) -> None:
        """The attempt could not be settled (the database stayed away, or a bug): it ends
        here with ``error``, its lease expires and another attempt takes it over."""

    @hookspec
    def durable_message_sent(
        self, workflow_id: str, topic: str, headers: Mapping[str, str]
    ) -> None:
        """A message was put in ``workflow_id``'s inbox (``client.send``), waking it if it
        waits on ``topic``; ``headers`` are those stored when it was started. Called in the
        sender's context."""

    @hookspec
    def durable_claim_finished(
        self, worker_id: str, claimed: int, limit: int, seconds: float
    ) -> None:
        """A worker's claim statement took ``claimed`` workflows of the ``limit`` it asked
        for, in ``seconds`` (not fired when it failed)."""

    @hookspec
    def durable_group_commit_flushed(
        self, writes: int, steps: int, settlements: int, seconds: float
    ) -> None:
        """A group commit sent ``writes`` row writes (``steps`` step rows and ``settlements``
        settlements, a settlement's last step counting as a write too) in one statement that
        took ``seconds``; not fired when it failed."""

    @hookspec
    def durable_worker_started(self, worker_id: str, concurrency: int) -> None:
        """A worker began claiming."""

    @hookspec
    def durable_worker_stopping(self, worker_id: str, in_flight: int) -> None:
        """A worker stopped claiming and is waiting for ``in_flight`` workflows."""


OBSERVER_HOOKS = frozenset(
    name
    for spec in (ObserverSpec, HeaderSpec)
    for name in vars(spec)
    if name.startswith("durable_")
)
