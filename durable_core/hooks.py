"""Observer hooks (pluggy), and the plugin manager that also finds store backends.

Plugins are found the way pytest finds its own: modules named by entry points
in the ``durable_core`` group, plus objects registered in code with
:func:`register_observer`. A hook implementation takes any subset of the
arguments its spec names. Every observer event carries ``workflow_id`` and,
where a worker is involved, ``worker_id``, ``attempts`` and ``max_attempts``.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, cast

import pluggy

from .redaction import get_logger
from .store import EmbeddedDatabase, Store

PROJECT = "durable_core"
ENTRY_POINT_GROUP = "durable_core"
BLOCK_ENV = "DURABLE_BLOCK_PLUGINS"
"""Entry-point plugins not to load, by name, comma-separated (like pytest's ``-p no:NAME``)."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

logger = get_logger("durable_core.hooks")


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
    """Events an observer can watch. Return values are ignored."""

    @hookspec
    def durable_workflow_enqueued(
        self, workflow_id: str, workflow_name: str, max_attempts: int
    ) -> None:
        """A workflow row was written as pending."""

    @hookspec
    def durable_workflow_claimed(
        self,
        worker_id: str,
        workflow_id: str,
        workflow_name: str,
        attempts: int,
        max_attempts: int,
        queue_wait: float | None,
        headers: Mapping[str, str],
    ) -> None:
        """A worker took the lease on a workflow and is about to run its body.

        ``queue_wait`` is how many seconds the workflow was due before this claim
        (``None`` when the claim took it over from a crashed attempt); ``headers`` are
        those stored when it was started (see :meth:`durable_workflow_headers`)."""

    @hookspec
    def durable_step_started(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        step_index: int,
        step_name: str,
        step_attempt: int,
    ) -> None:
        """A step body is about to run (not fired when a step replays from cache);
        ``step_attempt`` counts its tries, from 1 (more under a step retry policy)."""

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
    def durable_workflow_waiting(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        waiting_for: str,
        wake_at: datetime | None,
    ) -> None:
        """The workflow suspended, releasing its lease and slot, until ``waiting_for``
        (``sleep``, ``message:<topic>``, ``child:<id>``) happens or ``wake_at`` passes."""

    @hookspec
    def durable_workflow_cancelled(
        self, worker_id: str, workflow_id: str, attempts: int, max_attempts: int
    ) -> None:
        """A running workflow was cancelled: its body was stopped and it will not run again."""

    @hookspec
    def durable_lease_lost(
        self, worker_id: str, workflow_id: str, attempts: int, max_attempts: int
    ) -> None:
        """The worker lost its lease; another worker owns the workflow now."""

    @hookspec
    def durable_attempt_unsettled(
        self,
        worker_id: str,
        workflow_id: str,
        attempts: int,
        max_attempts: int,
        error: BaseException,
    ) -> None:
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

broken_plugins: dict[str, str] = {}
"""Entry points that failed to load, by name, with the reason (shown in URL errors)."""


def _guarded(hook: str, impl: pluggy.HookImpl) -> Callable[..., Any]:
    function = impl.function

    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Exception:
            fields = dict(zip(impl.argnames, args, strict=False))
            logger.exception(
                "observer %s raised in %s; ignored",
                impl.plugin_name,
                hook,
                extra={key: fields[key] for key in ("workflow_id", "worker_id") if key in fields},
            )
            return None

    return guarded


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, where an observer that raises is logged and skipped.

    Observer hooks are called through pluggy's own hook caller, so wrappers and
    call monitoring see every call. Each observer implementation is guarded when
    it is registered; the store hooks are not (their errors are the caller's).
    """

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self.add_hookspecs(StoreSpec)
        self.add_hookspecs(ObserverSpec)
        self.add_hookspecs(HeaderSpec)
        self.observing = False
        """Whether any observer hook has an implementation (else firing one costs nothing)."""

    def register(self, plugin: object, name: str | None = None) -> str | None:
        registered = super().register(plugin, name)
        for caller in self.get_hookcallers(plugin) or ():
            if caller.name not in OBSERVER_HOOKS:
                continue
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not (impl.wrapper or impl.hookwrapper):
                    # HookImpl.function is what pluggy's caller invokes.
                    setattr(impl, "function", _guarded(caller.name, impl))  # noqa: B010
        self._refresh()
        return registered

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        removed = super().unregister(plugin, name)
        self._refresh()
        return removed

    def _refresh(self) -> None:
        self.observing = any(
            getattr(self.hook, hook).get_hookimpls() for hook in sorted(OBSERVER_HOOKS)
        )


_manager: PluginManager | None = None
_SILENT = ObserverSpec()


def _load_entry_points(manager: PluginManager) -> None:
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if manager.get_plugin(entry_point.name) or manager.is_blocked(entry_point.name):
            continue
        try:
            plugin = entry_point.load()
        except ModuleNotFoundError as exc:
            # A built-in backend whose driver is not installed, most likely: it is
            # named when a URL asks for it, not in every process's log.
            broken_plugins[entry_point.name] = f"{entry_point.value}: {exc}"
            logger.debug("durable_core plugin %r not loaded: %s", entry_point.name, exc)
            continue
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


def plugin_manager() -> PluginManager:
    """The process-wide plugin manager, with entry-point plugins loaded on first use (but
    none named in ``$DURABLE_BLOCK_PLUGINS``).

    A plugin that fails to import is logged and left out, never fatal.
    """
    global _manager
    if _manager is None:
        manager = PluginManager()
        for name in os.environ.get(BLOCK_ENV, "").split(","):
            if name.strip():
                manager.set_blocked(name.strip())
        _load_entry_points(manager)
        _manager = manager
    return _manager


def observers() -> ObserverSpec:
    """The observer hooks, to fire as ``observers().durable_step_started(...)``.

    Typed as the spec, so mypy checks every call's arguments; at run time it is
    pluggy's hook relay (or, while no observer is registered, the spec itself,
    whose methods do nothing).
    """
    manager = plugin_manager()
    return cast(ObserverSpec, manager.hook) if manager.observing else _SILENT


def observed(hook: str) -> bool:
    """Whether any observer implements ``hook`` (to skip work only it would need)."""
    manager = plugin_manager()
    return manager.observing and bool(getattr(manager.hook, hook).get_hookimpls())


async def message_sent(store: Store, workflow_id: str, topic: str) -> None:
    """Announce a message sent to ``workflow_id`` (``durable_message_sent``), with the
    headers it was started with, read only when an observer implements the hook."""
    if observed("durable_message_sent"):
        record = await store.get_workflow(workflow_id)
        headers = (record.headers if record is not None else None) or {}
        observers().durable_message_sent(workflow_id=workflow_id, topic=topic, headers=headers)


def workflow_headers(workflow_id: str, workflow_name: str) -> dict[str, str]:
    """The headers observers contribute to a workflow being started (empty when none)."""
    manager = plugin_manager()
    if not manager.observing:
        return {}
    headers: dict[str, str] = {}
    # pluggy calls the last registered first: merging in reverse lets it win.
    results = manager.hook.durable_workflow_headers(
        workflow_id=workflow_id, workflow_name=workflow_name
    )
    for contributed in reversed(results):
        if isinstance(contributed, Mapping) and all(
            isinstance(key, str) and isinstance(value, str) for key, value in contributed.items()
        ):
            headers.update(contributed)
        else:
            logger.error(
                "an observer's durable_workflow_headers returned %r, not a mapping of strings; "
                "ignored",
                contributed,
                extra={"workflow_id": workflow_id},
            )
    return headers


def register_observer(observer: object, name: str | None = None) -> None:
    """Register an object (or module) whose ``@hookimpl`` methods observe events."""
    plugin_manager().register(observer, name=name)


def unregister_observer(observer: object) -> None:
    """Undo :func:`register_observer`."""
    plugin_manager().unregister(observer)
