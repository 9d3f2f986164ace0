"""durable-core: durable workflows for Python.

A workflow is an ``async def`` whose steps are persisted as they complete; a
retry resumes from the first step that has not completed.

The package, bottom to top (each part imports only those before it):

- ``errors``, ``durations``, ``redaction``: what every part uses;
- ``definitions``: what a user declares (workflows, queues, retry policies,
  schedules);
- ``seams``: the records, the store's roles, the hook specifications and the plugin
  manager: what backends and observers implement;
- ``codec``: values and errors as stored text;
- ``sql``: the rules of every SQL store, its schema and migrations, written once;
- ``memory``: the same rules in plain Python, a store for tests (``testing.MemoryStore``);
- ``runtime``: the engine (worker, executor, the attempt, journal, group commit,
  leases, scheduler);
- ``primitives``: what a workflow body calls (steps, waits, streams, updates);
- ``caller``: the caller's side (client, handles, sync client, opening a store);
- ``observers``, ``cli``, ``dashboard``, ``contract``, ``testing``: built on the rest.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

from .caller.backends import open_store, store_from_url
from .caller.client import (
    DurableClient,
    WorkflowStart,
    current_store,
    get_handle,
    send,
    set_default_store,
    start_workflow,
    start_workflow_with_id,
    start_workflows,
    use_store,
)
from .caller.handle import WorkflowHandle
from .codec import (
    Codec,
    EncryptingCodec,
    allow_modules,
    durable_type,
    register_codec,
    register_type,
    use_codec,
)
from .definitions.debounce import DebounceKey
from .definitions.queues import Queue, RateLimit
from .definitions.registry import Registry, Workflow, default_registry, workflow
from .definitions.retention import Keep, Retention
from .definitions.retry import RetryPolicy
from .definitions.schedules import Overlap, Schedule, ScheduleRecord
from .durations import MAX_DURATION
from .errors import (
    AppDatabaseError,
    AppDatabaseUnavailableError,
    AttributesNotSupportedError,
    BlockingCallInEventLoopError,
    BodyRaisedError,
    ClaimNotSupportedError,
    ConfigurationError,
    CorruptRecordError,
    DebounceNotSupportedError,
    DeterminismError,
    DuplicateWorkflowError,
    EncryptionKeyError,
    ErasedValueError,
    FrameworkError,
    HistoryDivergedError,
    InvalidArgumentsError,
    InvalidDatabaseURLError,
    InvalidDeclaredDurationError,
    InvalidDurationError,
    InvalidStateError,
    LeaseLostError,
    NonRetryableError,
    NotAWorkflowError,
    RegistrationError,
    RoleNotSupportedError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    SchemaMissingError,
    SchemaOutdatedError,
    SchemaTooNewError,
    SerializationError,
    StatsNotSupportedError,
    StepInputMismatchError,
    StepNameMismatchError,
    StepTimeoutError,
    StoreError,
    StoreUnavailableError,
    StreamClosedError,
    TalkNotSupportedError,
    TransactionConflictError,
    TransactionStepError,
    UnknownCodecError,
    UnknownWorkflowError,
    UpdateConflictError,
    UpdateNotHandledError,
    UpdateRejectedError,
    UpdateTimeoutError,
    ValueRefusedError,
    ValueTooLargeError,
    WaitTimeoutError,
    WorkerStartError,
    WorkflowCancelledError,
    WorkflowConflictError,
    WorkflowFailedError,
    WorkflowNotFinishedError,
    WorkflowNotFoundError,
    WorkflowTimeoutError,
)
from .primitives.attributes import set_attributes
from .primitives.patching import deprecate_patch, patched
from .primitives.saga import CompensatedError, Saga, SagaUsageError, saga
from .primitives.steps import Step, cleanup, workflow_step
from .primitives.streams import close_stream, write_stream
from .primitives.transactions import TransactionStep, transaction_step
from .primitives.updates import UpdateRequest, recv_update
from .primitives.waiting import now, random, recv, set_event, sleep, sleep_until
from .runtime.config import WorkflowConfig
from .runtime.context import WorkflowContext
from .runtime.executor import Executor
from .seams.attributes import AttributeRange, Attributes
from .seams.events import AttemptEvent
from .seams.hookspecs import hookimpl
from .seams.operators import WorkflowFilter
from .seams.plugins import register_observer, unregister_observer
from .seams.records import StepStatus, WorkflowStatus
from .seams.store import Claimer, Store
from .seams.transactions import IsolationLevel

if TYPE_CHECKING:
    from .sql.app_database import AppDatabase


def __getattr__(name: str) -> Any:
    # AppDatabase needs SQLAlchemy, which ``import durable_core`` alone never loads.
    if name == "AppDatabase":
        from .sql.app_database import AppDatabase

        return AppDatabase
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AppDatabase",
    "AppDatabaseError",
    "AppDatabaseUnavailableError",
    "AttributeRange",
    "Attributes",
    "AttemptEvent",
    "AttributesNotSupportedError",
    "BodyRaisedError",
    "Codec",
    "MAX_DURATION",
    "Queue",
    "RateLimit",
    "Keep",
    "Retention",
    "BlockingCallInEventLoopError",
    "ClaimNotSupportedError",
    "Claimer",
    "CompensatedError",
    "ConfigurationError",
    "CorruptRecordError",
    "DebounceKey",
    "DebounceNotSupportedError",
    "DeterminismError",
    "DuplicateWorkflowError",
    "DurableClient",
    "Executor",
    "FrameworkError",
    "InvalidArgumentsError",
    "InvalidDatabaseURLError",
    "InvalidDeclaredDurationError",
    "InvalidDurationError",
    "InvalidStateError",
    "LeaseLostError",
    "NonRetryableError",
    "NotAWorkflowError",
    "Overlap",
    "Registry",
    "RegistrationError",
    "RoleNotSupportedError",
    "RetryPolicy",
    "Saga",
    "SagaUsageError",
    "Schedule",
    "ScheduleConflictError",
    "ScheduleNotFoundError",
    "ScheduleRecord",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SchemaTooNewError",
    "SerializationError",
    "StatsNotSupportedError",
    "Step",
    "StepInputMismatchError",
    "StepNameMismatchError",
    "HistoryDivergedError",
    "StepStatus",
    "StepTimeoutError",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "StreamClosedError",
    "TalkNotSupportedError",
    "TransactionConflictError",
    "TransactionStep",
    "TransactionStepError",
    "IsolationLevel",
    "UpdateConflictError",
    "UpdateNotHandledError",
    "UpdateRejectedError",
    "UpdateRequest",
    "UpdateTimeoutError",
    "UnknownCodecError",
    "EncryptionKeyError",
    "ErasedValueError",
    "UnknownWorkflowError",
    "ValueTooLargeError",
    "ValueRefusedError",
    "WaitTimeoutError",
    "Workflow",
    "WorkerStartError",
    "WorkflowCancelledError",
    "WorkflowConfig",
    "WorkflowConflictError",
    "WorkflowContext",
    "WorkflowFailedError",
    "WorkflowFilter",
    "WorkflowHandle",
    "WorkflowNotFinishedError",
    "WorkflowNotFoundError",
    "WorkflowStart",
    "WorkflowTimeoutError",
    "WorkflowStatus",
    "allow_modules",
    "cleanup",
    "close_stream",
    "durable_type",
    "current_store",
    "default_registry",
    "deprecate_patch",
    "get_handle",
    "hookimpl",
    "now",
    "open_store",
    "patched",
    "register_codec",
    "EncryptingCodec",
    "random",
    "recv",
    "recv_update",
    "register_observer",
    "register_type",
    "saga",
    "send",
    "set_attributes",
    "set_default_store",
    "set_event",
    "sleep",
    "sleep_until",
    "start_workflow",
    "start_workflow_with_id",
    "start_workflows",
    "store_from_url",
    "transaction_step",
    "unregister_observer",
    "use_codec",
    "use_store",
    "workflow",
    "workflow_step",
    "write_stream",
]

try:
    __version__: str = _version("durable-core")
    """The installed distribution's version (``durable --version`` prints it too)."""
except _PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
