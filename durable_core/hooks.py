"""Observer hooks (pluggy), and the plugin manager that also finds store backends.

Plugins are found the way pytest finds its own: modules named by entry points
in the ``durable_core`` group, plus objects registered in code with
:func:`register_observer`. A hook implementation takes any subset of the
arguments its spec names. Every observer event carries ``workflow_id`` and,
where a worker is involved, ``worker_id``, ``attempts`` and ``max_attempts``.
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

import pluggy

from .store import EmbeddedDatabase, Store

PROJECT = "durable_core"
ENTRY_POINT_GROUP = "durable_core"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

logger = logging.getLogger("durable_core.hooks")


class StoreSpec:
    """Hooks a backend implements to be found by database URL."""

    @hookspec(firstresult=True)
    def durable_store_from_url(self, url: str) -> Store | None:
        """Return a (not yet opened) store for ``url``, or ``None`` if the URL is not yours."""

    @hookspec
    def durable_store_url_forms(self) -> list[str]:  # type: ignore[empty-body]
        """The URL forms this backend accepts, for error messages (e.g. ``sqlite:///path``)."""

    @hookspec(firstresult=True)
    def durable_embedded_database(self, data_dir: str | None) -> EmbeddedDatabase | None:
        """A database to start when no URL is given (the PostgreSQL backend ships one)."""


class ObserverSpec:
    """Events an observer can watch. Return values are ignored."""

    @hookspec
    def durable_workflow_enqueued(
        self, workflow_id: str, workflow_name: str, max_attempts: int
    ) -> None:
        """A workflow row was written as pending."""

    @hookspec
    def durable_workflow_claimed(
        self, worker_id: str, workflow_id: str, workflow_name: str, attempts: int, max_attempts: int
    ) -> None:
        """A worker took the lease on a workflow and is about to run its body."""

    @hookspec
    def durable_step_started(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        step_index: int,
        step_name: str,
    ) -> None:
        """A step body is about to run (not fired when a step replays from cache)."""

    @hookspec
    def durable_step_succeeded(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        step_index: int,
        step_name: str,
        cached: bool,
    ) -> None:
        """A step returned; ``cached`` is true when its output came from the history."""

    @hookspec
    def durable_step_failed(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        step_index: int,
        step_name: str,
        error: BaseException,
    ) -> None:
        """A step body raised."""

    @hookspec
    def durable_retry_scheduled(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        error: dict[str, Any],
        delay_seconds: float,
    ) -> None:
        """An attempt failed and the workflow will run again after ``delay_seconds``."""

    @hookspec
    def durable_workflow_succeeded(
        self, worker_id: str, workflow_id: str, attempts: int, max_attempts: int, output: str
    ) -> None:
        """The workflow settled as succeeded with this output JSON."""

    @hookspec
    def durable_workflow_failed(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        error: dict[str, Any],
    ) -> None:
        """The workflow settled as failed; no further attempt will run."""

    @hookspec
    def durable_lease_lost(
        self, worker_id: str, workflow_id: str, attempts: int, max_attempts: int
    ) -> None:
        """The worker lost its lease; another worker owns the workflow now."""

    @hookspec
    def durable_worker_started(self, worker_id: str, concurrency: int) -> None:
        """A worker began claiming."""

    @hookspec
    def durable_worker_stopping(self, worker_id: str, in_flight: int) -> None:
        """A worker stopped claiming and is waiting for ``in_flight`` workflows."""


_manager: pluggy.PluginManager | None = None

broken_plugins: dict[str, str] = {}
"""Entry points that failed to load, by name, with the reason (shown in URL errors)."""


def _load_entry_points(manager: pluggy.PluginManager) -> None:
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if manager.get_plugin(entry_point.name) or manager.is_blocked(entry_point.name):
            continue
        try:
            plugin = entry_point.load()
        except Exception as exc:
            broken_plugins[entry_point.name] = f"{entry_point.value}: {type(exc).__name__}: {exc}"
            logger.error(
                "durable_core plugin %r (%s) failed to load: %s",
                entry_point.name,
                entry_point.value,
                exc,
            )
            continue
        manager.register(plugin, name=entry_point.name)


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with entry-point plugins loaded on first use.

    A plugin that fails to import is logged and left out, never fatal.
    """
    global _manager
    if _manager is None:
        manager = pluggy.PluginManager(PROJECT)
        manager.add_hookspecs(StoreSpec)
        manager.add_hookspecs(ObserverSpec)
        _load_entry_points(manager)
        _manager = manager
    return _manager


def register_observer(observer: object, name: str | None = None) -> None:
    """Register an object (or module) whose ``@hookimpl`` methods observe events."""
    plugin_manager().register(observer, name=name)


def unregister_observer(observer: object) -> None:
    """Undo :func:`register_observer`."""
    plugin_manager().unregister(observer)


def notify(event: str, **fields: Any) -> None:
    """Fire an observer hook. An observer that raises is logged and skipped."""
    caller = getattr(plugin_manager().hook, event)
    impls = caller.get_hookimpls()
    if not impls:
        return
    for impl in reversed(impls):
        try:
            impl.function(**{arg: fields[arg] for arg in impl.argnames})
        except Exception:
            logger.exception(
                "observer %s raised in %s; ignored",
                impl.plugin_name,
                event,
                extra={key: fields[key] for key in ("workflow_id", "worker_id") if key in fields},
            )
