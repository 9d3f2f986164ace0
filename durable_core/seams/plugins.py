"""The plugin manager (pluggy's), which finds store backends and calls observers.

Plugins are found the way pytest finds its own: modules named by entry points
in the ``durable_core`` group, plus objects registered in code with
:func:`register_observer`. A hook implementation takes any subset of the
arguments its spec names. An event about one attempt of a workflow carries it
as ``attempt``, an :class:`~durable_core.seams.events.AttemptEvent`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import pluggy

from ..errors import ConfigurationError
from ..redaction import get_logger
from .events import AttemptEvent
from .hookspecs import OBSERVER_HOOKS, PROJECT, HeaderSpec, ObserverSpec, StoreSpec
from .roles import CallerStore

ENTRY_POINT_GROUP = "durable_core"
BLOCK_ENV = "DURABLE_BLOCK_PLUGINS"
"""Entry-point plugins not to load, by name, comma-separated (like pytest's ``-p no:NAME``)."""

logger = get_logger("durable_core.plugins")

broken_plugins: dict[str, str] = {}
"""Entry points that failed to load, by name, with the reason (shown in URL errors)."""


def _argnames(method: Callable[..., Any]) -> list[str]:
    """The argument names pluggy passes ``method`` (``self`` left out)."""
    names = list(inspect.signature(method).parameters)
    return names[1:] if names[:1] == ["self"] else names


def _guarded(hook: str, plugin_name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    argnames = _argnames(method)

    @functools.wraps(method)  # keeps the hookimpl marker and the argument names pluggy reads
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception:
            values = {**dict(zip(argnames, args, strict=False)), **kwargs}
            event = values.get("attempt")
            if isinstance(event, AttemptEvent):
                values.update(workflow_id=event.workflow_id, worker_id=event.worker_id)
            logger.exception(
                "observer %s raised in %s; ignored",
                plugin_name,
                hook,
                extra={key: values[key] for key in ("workflow_id", "worker_id") if key in values},
            )
            return None

    return guarded


class _Guarded:
    """What is registered for an observer: its hook implementations, those of observer
    hooks guarded so that one that raises is logged and skipped."""

    def __init__(self, plugin: object, plugin_name: str, manager: pluggy.PluginManager) -> None:
        self.plugin = plugin
        self.__name__ = plugin_name
        for name in dir(plugin):
            opts = manager.parse_hookimpl_opts(plugin, name)
            if opts is None:
                continue
            method = getattr(plugin, name)
            wrapping = opts.get("wrapper") or opts.get("hookwrapper")
            if name in OBSERVER_HOOKS and not wrapping:
                method = _guarded(name, plugin_name, method)
            setattr(self, name, method)


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, where an observer that raises is logged and skipped.

    Hooks are called through pluggy's own hook caller, so wrappers and call
    monitoring see every call. What it registers for a plugin is a
    :class:`_Guarded` copy of its hook implementations, each observer one guarded
    (pluggy's own records are left as pluggy made them); the store hooks are not
    guarded (their errors are the caller's).
    """

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self.add_hookspecs(StoreSpec)
        self.add_hookspecs(ObserverSpec)
        self.add_hookspecs(HeaderSpec)
        self._copies: dict[int, _Guarded] = {}
        self.observing = False
        """Whether any observer hook has an implementation (else firing one costs nothing)."""

    def register(self, plugin: object, name: str | None = None) -> str | None:
        if id(plugin) in self._copies:
            raise ValueError(f"Plugin already registered: {name or plugin!r}")
        copy = _Guarded(plugin, name or self.get_canonical_name(plugin), self)
        registered = super().register(copy, name or self.get_canonical_name(plugin))
        if registered is not None:
            self._copies[id(plugin)] = copy
        self._refresh()
        return registered

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        if plugin is None and name is not None:
            plugin = super().get_plugin(name)
        if plugin is not None and not isinstance(plugin, _Guarded):
            plugin = self._copies.get(id(plugin), plugin)
        if isinstance(plugin, _Guarded):
            self._copies.pop(id(plugin.plugin), None)
        removed = super().unregister(plugin) if plugin is not None else None
        self._refresh()
        return removed.plugin if isinstance(removed, _Guarded) else removed

    def is_registered(self, plugin: object) -> bool:
        return id(plugin) in self._copies or super().is_registered(plugin)

    def get_plugin(self, name: str) -> Any | None:
        found = super().get_plugin(name)
        return found.plugin if isinstance(found, _Guarded) else found

    def get_plugins(self) -> set[Any]:
        return {p.plugin if isinstance(p, _Guarded) else p for p in super().get_plugins()}

    def get_name(self, plugin: object) -> str | None:
        return super().get_name(self._copies.get(id(plugin), plugin))

    def list_name_plugin(self) -> list[tuple[str, Any]]:
        return [
            (name, p.plugin if isinstance(p, _Guarded) else p)
            for name, p in super().list_name_plugin()
        ]

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


def observing() -> bool:
    """Whether any observer hook has an implementation: while none has, a hot path skips
    building an event and calling the hook (which would do nothing)."""
    return plugin_manager().observing


def observed(hook: str) -> bool:
    """Whether any observer implements ``hook`` (to skip work only it would need)."""
    manager = plugin_manager()
    return manager.observing and bool(getattr(manager.hook, hook).get_hookimpls())


async def message_sent(store: CallerStore, workflow_id: str, topic: str) -> None:
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
    """Register an object (or module) whose ``@hookimpl`` methods observe events. One
    whose hook takes an argument its spec does not name is refused with
    :class:`~durable_core.errors.ConfigurationError`."""
    try:
        plugin_manager().register(observer, name=name)
    except pluggy.PluginValidationError as exc:
        why = " ".join(str(exc).split())
        raise ConfigurationError(f"observer {name or observer!r} refused: {why}") from exc


def unregister_observer(observer: object) -> None:
    """Undo :func:`register_observer`."""
    plugin_manager().unregister(observer)
