"""durable-core: durable workflows for Python.

A workflow is an ``async def`` whose steps are persisted as they complete; a
retry resumes from the first step that has not completed.
"""

from .backends import open_store, store_from_url
from .client import (
    DurableClient,
    current_store,
    get_handle,
    set_default_store,
    start_workflow,
    start_workflows,
    use_store,
)
from .config import WorkflowConfig
from .context import WorkflowContext
from .errors import (
    ClaimNotSupportedError,
    ConfigurationError,
    CorruptRecordError,
    DeterminismError,
    DuplicateWorkflowError,
    FrameworkError,
    InvalidArgumentsError,
    InvalidDatabaseURLError,
    InvalidStateError,
    LeaseLostError,
    NotAWorkflowError,
    RegistrationError,
    SchemaMissingError,
    SchemaOutdatedError,
    SerializationError,
    StepInputMismatchError,
    StepNameMismatchError,
    StoreError,
    StoreUnavailableError,
    UnknownWorkflowError,
    ValueTooLargeError,
    WaitTimeoutError,
    WorkflowFailedError,
    WorkflowNotFinishedError,
    WorkflowNotFoundError,
)
from .executor import Executor
from .handle import WorkflowHandle
from .hooks import hookimpl, register_observer, unregister_observer
from .records import StepStatus, WorkflowStatus
from .registry import Registry, Workflow, default_registry, workflow
from .steps import Step, workflow_step
from .store import Claimer, Store

__all__ = [
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
    "InvalidStateError",
    "LeaseLostError",
    "NotAWorkflowError",
    "Registry",
    "RegistrationError",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SerializationError",
    "Step",
    "StepInputMismatchError",
    "StepNameMismatchError",
    "StepStatus",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "UnknownWorkflowError",
    "ValueTooLargeError",
    "WaitTimeoutError",
    "Workflow",
    "WorkflowConfig",
    "WorkflowContext",
    "WorkflowFailedError",
    "WorkflowHandle",
    "WorkflowNotFinishedError",
    "WorkflowNotFoundError",
    "WorkflowStatus",
    "current_store",
    "default_registry",
    "get_handle",
    "hookimpl",
    "open_store",
    "register_observer",
    "set_default_store",
    "start_workflow",
    "start_workflows",
    "store_from_url",
    "unregister_observer",
    "use_store",
    "workflow",
    "workflow_step",
]
