"""Where durable_core's modules moved when its flat layout became packages.

Old import paths keep working, with a ``DeprecationWarning``: code and store plugins
written against them, Alembic revisions ``durable alembic`` wrote, and values and
errors recorded under an old module's name (a type recorded as
``durable_core.records:WorkflowStatus`` is read back as the class it now is).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED: dict[str, str] = {  # the modules of the last flat release
    "durable_core.attempt": "durable_core.runtime.attempt",
    "durable_core.backends": "durable_core.caller.backends",
    "durable_core.client": "durable_core.caller.client",
    "durable_core.coltypes": "durable_core.sql.coltypes",
    "durable_core.config": "durable_core.runtime.config",
    "durable_core.context": "durable_core.runtime.context",
    "durable_core.executor": "durable_core.runtime.executor",
    "durable_core.failures": "durable_core.codec.failures",
    "durable_core.group_commit": "durable_core.runtime.group_commit",
    "durable_core.handle": "durable_core.caller.handle",
    "durable_core.hooks": "durable_core.seams.plugins",
    "durable_core.journal": "durable_core.runtime.journal",
    "durable_core.leases": "durable_core.runtime.leases",
    "durable_core.metrics": "durable_core.observers.metrics",
    "durable_core.migrations": "durable_core.sql.migrations",
    "durable_core.oncall": "durable_core.caller.oncall",
    "durable_core.operators": "durable_core.seams.operators",
    "durable_core.otel": "durable_core.observers.otel",
    "durable_core.patching": "durable_core.primitives.patching",
    "durable_core.queues": "durable_core.definitions.queues",
    "durable_core.records": "durable_core.seams.records",
    "durable_core.registry": "durable_core.definitions.registry",
    "durable_core.replay": "durable_core.runtime.replay",
    "durable_core.retry": "durable_core.definitions.retry",
    "durable_core.schedule_admin": "durable_core.caller.schedule_admin",
    "durable_core.scheduler": "durable_core.runtime.scheduler",
    "durable_core.schedules": "durable_core.definitions.schedules",
    "durable_core.schema": "durable_core.sql.schema",
    "durable_core.schema_history": "durable_core.sql.schema_history",
    "durable_core.serialization": "durable_core.codec",
    "durable_core.settling": "durable_core.runtime.settling",
    "durable_core.steps": "durable_core.primitives.steps",
    "durable_core.store": "durable_core.seams.store",
    "durable_core.suspension": "durable_core.runtime.suspension",
    "durable_core.sync": "durable_core.caller.sync",
    "durable_core.waiting": "durable_core.primitives.waiting",
    "durable_core.worker": "durable_core.runtime.worker",
    "durable_core.worker_process": "durable_core.runtime.worker_process",
}
"""Each old module name, and where it lives now."""

MOVED_TYPES: dict[str, str] = {
    "durable_core.retry.NonRetryableError": "durable_core.errors.NonRetryableError",
    "durable_core.retry.StepTimeoutError": "durable_core.errors.StepTimeoutError",
}
"""Classes that moved to another module, by their old and new dotted names."""


def current_name(dotted: str) -> str:
    """``dotted`` (a module, or a name in one) under the module it now lives in."""
    dotted = MOVED_TYPES.get(dotted, dotted)
    for old, new in MOVED.items():
        if dotted == old or dotted.startswith(old + ".") or dotted.startswith(old + ":"):
            return new + dotted[len(old) :]
    return dotted


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as the module it moved to."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {MOVED[spec.name]}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is the one it moved to, already imported."""


def install() -> None:
    """Let the old module names be imported (once per process)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
