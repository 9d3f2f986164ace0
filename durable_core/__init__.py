"""durable-core: durable workflows for Python.

A workflow is an ``async def`` whose steps are persisted as they complete; a
retry resumes from the first step that has not completed.
"""

from .backends import open_store, store_from_url
from .client import (
    DurableClient,
    WorkflowStart,
    current_store,
    get_handle,
    set_default_store,
    start_workflow,
    start_workflow_with_id,
    start_workflows,
    use_store,
)
from .config import WorkflowConfig
from .context import WorkflowContext
from .durations import MAX_DURATION
from .errors import (
    ClaimNotSupportedError,
    ConfigurationError,
    CorruptRecordError,
    DeterminismError,
    DuplicateWorkflowError,
    FrameworkError,
    InvalidArgumentsError,
    InvalidDatabaseURLError,
    InvalidDeclaredDurationError,
    InvalidDurationError,
    InvalidStateError,
    LeaseLostError,
    NotAWorkflowError,
    RegistrationError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    SchemaMissingError,
    SchemaOutdatedError,
    SerializationError,
    StatsNotSupportedError,
    StepInputMismatchError,
    StepNameMismatchError,
    StoreError,
    StoreUnavailableError,
    UnknownWorkflowError,
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
from .executor import Executor
from .handle import WorkflowHandle
from .hooks import hookimpl, register_observer, unregister_observer
from .operators import WorkflowFilter
from .patching import deprecate_patch, patched
from .queues import Queue, RateLimit
from .records import StepStatus, WorkflowStatus
from .registry import Registry, Workflow, default_registry, workflow
from .retry import NonRetryableError, RetryPolicy, StepTimeoutError
from .schedules import Schedule, ScheduleRecord
from .steps import Step, cleanup, workflow_step
from .store import Claimer, Store
from .waiting import recv, send, set_event, sleep, sleep_until

__all__ = [
    "MAX_DURATION",
    "Queue",
    "RateLimit",
    "ClaimNotSupportedError",
    "Claimer",
    "ConfigurationError",
    "CorruptRecordError",
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
    "Registry",
    "RegistrationError",
    "RetryPolicy",
    "Schedule",
    "ScheduleConflictError",
    "ScheduleNotFoundError",
    "ScheduleRecord",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SerializationError",
    "StatsNotSupportedError",
    "Step",
    "StepInputMismatchError",
    "StepNameMismatchError",
    "StepStatus",
    "StepTimeoutError",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "UnknownWorkflowError",
    "ValueTooLargeError",
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
    "cleanup",
    "current_store",
    "default_registry",
    "deprecate_patch",
    "get_handle",
    "hookimpl",
    "open_store",
    "patched",
    "recv",
    "register_observer",
    "send",
    "set_default_store",
    "set_event",
    "sleep",
    "sleep_until",
    "start_workflow",
    "start_workflow_with_id",
    "start_workflows",
    "store_from_url",
    "unregister_observer",
    "use_store",
    "workflow",
    "workflow_step",
]
