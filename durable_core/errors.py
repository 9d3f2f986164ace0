"""The exception hierarchy. Every error the library raises is a :class:`FrameworkError`."""

from __future__ import annotations

from typing import Any

from .redaction import redact


class FrameworkError(Exception):
    """Root of every error raised by durable-core and its backends.

    ``retryable`` tells the executor whether running the workflow again could
    succeed; errors that would fail the same way every time settle the row as
    ``failed`` at once instead of spending the attempt budget. Its message never
    holds a credential (:func:`~durable_core.redaction.redact`).
    """

    retryable: bool = True

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class ConfigurationError(FrameworkError):
    """A setting, environment variable or programmatic config is invalid."""

    retryable = False


class InvalidDatabaseURLError(ConfigurationError):
    """A database URL is malformed or no installed backend accepts it."""


class BlockingCallInEventLoopError(ConfigurationError):
    """A blocking :class:`~durable_core.caller.sync.SyncClient` method was called where an event
    loop runs, which it would stall: ``await`` the async API there instead."""


class RegistrationError(FrameworkError):
    """A workflow or step declaration is invalid."""

    retryable = False


class InvalidDurationError(ConfigurationError):
    """A duration or deadline out of range: not finite, negative (or zero where it must be
    positive), or beyond :data:`durable_core.durations.MAX_DURATION` (100 years)."""


class InvalidDeclaredDurationError(InvalidDurationError, RegistrationError):
    """An :class:`InvalidDurationError` in a declaration (``@workflow``, ``@workflow_step``)."""


class DuplicateWorkflowError(RegistrationError):
    """Two different functions were registered under the same workflow name."""


class NotAWorkflowError(RegistrationError, TypeError):
    """A function passed where a ``@workflow`` was expected is not one."""


class InvalidArgumentsError(FrameworkError, TypeError):
    """The arguments given to ``start_workflow`` do not fit the workflow's signature."""

    retryable = False


class UnknownWorkflowError(FrameworkError):
    """A stored workflow names a function that no registered workflow has."""

    retryable = False


class SerializationError(FrameworkError):
    """A value cannot be stored as JSON and read back as the same value.

    Also raised when a stored JSON column cannot be decoded (corruption).
    """

    retryable = False


class UnknownCodecError(SerializationError):
    """A stored value names a codec (``@name:...``) that this process has not registered with
    :func:`~durable_core.codec.register_codec`, or :func:`~durable_core.codec.use_codec` was
    given such a name. Not retryable, like :class:`UnknownWorkflowError`: the code that runs
    the workflow lacks what its rows need."""


class EncryptionKeyError(SerializationError):
    """A value cannot be encrypted or decrypted: it was written under a key this process
    has not been given, it does not decrypt with the key named (a wrong key, or text
    altered in the database), or no key is set up to write with."""


class ErasedValueError(SerializationError):
    """A value was erased (``durable erase``, ``DurableClient.erase``): the workflow's row
    and history stay, its payloads do not. A body replaying over it, or a caller reading
    it, gets this error."""


DETERMINISM_HINT = (
    " (A body that reads the clock, draws random numbers or branches on what it reads "
    "outside a step replays differently: use durable_core.now() and durable_core.random(), "
    "which replay what they first returned, or do it in a step. A deployed change of "
    "code: guard it with patched(); see Troubleshooting in the docs.)"
)
"""What every :class:`DeterminismError`'s message ends with."""


class DeterminismError(FrameworkError):
    """A replay broke the determinism contract: at step ``index`` (``path`` in a concurrent
    body) the body called ``called`` where its history holds ``recorded``.

    Its message ends with :data:`DETERMINISM_HINT`: the usual causes and their cure."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        index: int | None = None,
        path: str | None = None,
        recorded: str | None = None,
        called: str | None = None,
    ) -> None:
        hinted = message.endswith(DETERMINISM_HINT)
        super().__init__(message if hinted else message + DETERMINISM_HINT)
        self.index = index
        self.path = path
        self.recorded = recorded
        self.called = called


class StepInputMismatchError(DeterminismError):
    """A replayed step was called with a different input than the cached one."""


class StepNameMismatchError(DeterminismError):
    """A different step stands at this index in the cached history."""


class HistoryDivergedError(DeterminismError):
    """A replay made a new call while calls its history holds can no longer be reached (the
    branch that made them ended without making them, or was never started): the body
    would silently do new work and leave recorded work behind. ``path`` and ``recorded``
    name the recorded call left behind, ``called`` the new one."""


class WaitTimeoutError(FrameworkError, TimeoutError):
    """Waiting on a workflow ran past its deadline. The workflow is not cancelled."""


class WorkflowNotFoundError(FrameworkError, LookupError):
    """No workflow with that id exists in the store."""


class WorkflowFailedError(FrameworkError):
    """The workflow settled as failed (or cancelled); ``error`` holds what was recorded.

    Read from a handle, it is also the recorded exception's own type when that type
    is importable here (see :func:`durable_core.codec.failures.recorded_exception`).
    """

    def __init__(self, message: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.error = error or {}


class WorkflowCancelledError(WorkflowFailedError):
    """The workflow was cancelled (by a user, or with its parent); recorded as its error."""


class WorkflowNotFinishedError(FrameworkError):
    """The workflow has no output yet because it has not succeeded."""


class BodyRaisedError(FrameworkError):
    """A workflow body raised a ``BaseException`` that is not an ``Exception`` (a
    ``SystemExit``, a ``KeyboardInterrupt``, a stray cancellation, an exception group
    holding one): it fails that workflow like any error, never the worker."""


class InvalidStateError(FrameworkError):
    """An operation does not apply to the workflow in its current status."""


class WorkflowTimeoutError(WorkflowCancelledError, TimeoutError):
    """A workflow's timeout passed: it was cancelled, with this as its recorded error."""

    retryable = False


class WorkflowConflictError(FrameworkError):
    """A start named an existing workflow id with another workflow or other arguments."""

    retryable = False


class ScheduleNotFoundError(FrameworkError):
    """No schedule has this name."""

    retryable = False


class ScheduleConflictError(FrameworkError):
    """A schedule of this name exists already, starting something else or at other times."""

    retryable = False


class ClaimNotSupportedError(FrameworkError):
    """This store cannot claim work: the worker needs PostgreSQL."""

    retryable = False

    @classmethod
    def for_store(cls, description: str) -> ClaimNotSupportedError:
        """The error a store that cannot claim raises at its first claim."""
        return cls(
            f"{description} cannot claim workflows: the worker needs PostgreSQL, whose "
            "`FOR UPDATE SKIP LOCKED` lets several workers share a queue safely. Set "
            "DURABLE_DATABASE_URL (or pass --database-url) to a postgresql:// URL, or run "
            "`durable worker --embedded` for local use (pip install 'durable-core[embedded]'). "
            "This store still enqueues, reads, and runs workflows in-process with "
            "durable_core.testing.WorkflowRunner."
        )


class RoleNotSupportedError(FrameworkError):
    """A store lacks a role (a protocol of :mod:`durable_core.seams.roles`) that the code
    given it needs: the worker refuses it at boot, the client at the call that needs it."""

    retryable = False


class WorkerStartError(FrameworkError):
    """A ``durable worker`` process started for a test exited, or did not start in time."""


class StatsNotSupportedError(FrameworkError):
    """This store cannot count the attempts that end (it lacks ``WorkflowStats``)."""

    retryable = False


class TalkNotSupportedError(FrameworkError):
    """This store keeps no streams or updates (it lacks ``Streams`` or ``Updates``)."""

    retryable = False


class DebounceNotSupportedError(FrameworkError):
    """This store cannot debounce starts (it lacks ``Debouncer``)."""

    retryable = False


class AttributesNotSupportedError(FrameworkError):
    """This store keeps no searchable attributes (it lacks ``Attributes``)."""

    retryable = False


class StreamClosedError(InvalidStateError):
    """A body wrote to a stream it had closed."""

    retryable = False


class UpdateRejectedError(FrameworkError):
    """The workflow's validator rejected an update: it never entered the history."""

    retryable = False


class UpdateConflictError(FrameworkError):
    """An update id was sent again with another name or payload."""

    retryable = False


class UpdateNotHandledError(InvalidStateError):
    """The workflow ended (or was not running) before it replied to the update."""


class UpdateTimeoutError(WaitTimeoutError):
    """No reply came in time. The update stays sent: the same update id awaits it again."""


class LeaseLostError(FrameworkError):
    """The worker no longer holds the lease on a workflow; another worker owns it now."""

    @classmethod
    def refused(cls, worker_id: str, workflow_id: str, what: str) -> LeaseLostError:
        """A fenced write (``what``) refused because the worker's lease is not current."""
        return cls(
            f"worker {worker_id} no longer holds workflow {workflow_id}: {what} refused "
            "(the lease expired and was reclaimed, or the workflow was cancelled)"
        )


class StoreError(FrameworkError):
    """A store operation failed; the driver's exception is chained as ``__cause__``."""


class StoreUnavailableError(StoreError):
    """The database could not be reached, or rolled the operation back for a conflict with
    another transaction (a deadlock). Transient: the operation may be retried."""

    reported = False
    """The store has logged the outage this belongs to already: who retries the operation
    need not log it again (above debug level)."""


class SchemaMissingError(StoreError):
    """The durable tables do not exist. Run ``durable migrate`` or ``apply_schema()``."""

    retryable = False


class SchemaOutdatedError(StoreError):
    """The database's schema is older than this release needs. Run ``durable migrate``."""

    retryable = False


class SchemaTooNewError(StoreError):
    """A newer release migrated the database with a change that is not additive: workers
    of this release cannot run on it. Run the release that migrated it."""

    retryable = False


class CorruptRecordError(StoreError, SerializationError):
    """A stored row holds a value that cannot be read back."""

    retryable = False


class ValueTooLargeError(StoreError):
    """A value is larger than the store accepts in one write; nothing was written."""

    retryable = False


class ValueRefusedError(StoreError, ConfigurationError):
    """The database refused a value its column cannot hold (a NUL in PostgreSQL text, a
    value wider than its column, a number out of range): bad input, so nothing was
    written and nothing retries it (a ``ConfigurationError`` as much as a ``StoreError``)."""

    retryable = False


class NonRetryableError(FrameworkError):
    """Raise it (or a subclass) from a step or a body to fail the workflow at once, with no
    retry by any policy."""

    retryable = False


class StepTimeoutError(FrameworkError, TimeoutError):
    """A step body ran longer than its ``timeout``; a failure of that step, retried by its
    policy."""


class TransactionStepError(FrameworkError):
    """A transaction step was used wrongly: a durable call (a step, ``sleep``, ``recv``, a
    child start, a message...) made inside its body, or a database that cannot run one."""

    retryable = False


class TransactionConflictError(FrameworkError):
    """A transaction step's transaction was rolled back for a conflict with another one (a
    serialization failure, a deadlock, a busy database, or another run of the same call
    recording first): nothing was written, and the step runs again."""


class AppDatabaseError(FrameworkError):
    """An application database a transaction step writes to failed: its record table is
    missing and cannot be made, or it refused the statement."""

    retryable = False


class AppDatabaseUnavailableError(AppDatabaseError):
    """An application database could not be reached. Transient: retried as a failure of the
    step (by its retry policy), else of the attempt."""

    retryable = True


__all__ = [
    "AppDatabaseError",
    "AppDatabaseUnavailableError",
    "AttributesNotSupportedError",
    "BlockingCallInEventLoopError",
    "BodyRaisedError",
    "ClaimNotSupportedError",
    "ConfigurationError",
    "CorruptRecordError",
    "DebounceNotSupportedError",
    "DeterminismError",
    "DuplicateWorkflowError",
    "FrameworkError",
    "InvalidArgumentsError",
    "InvalidDatabaseURLError",
    "InvalidDeclaredDurationError",
    "InvalidDurationError",
    "InvalidStateError",
    "LeaseLostError",
    "NotAWorkflowError",
    "RegistrationError",
    "RoleNotSupportedError",
    "ScheduleConflictError",
    "ScheduleNotFoundError",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SchemaTooNewError",
    "SerializationError",
    "StatsNotSupportedError",
    "StepInputMismatchError",
    "StepNameMismatchError",
    "HistoryDivergedError",
    "StoreError",
    "StoreUnavailableError",
    "StreamClosedError",
    "TalkNotSupportedError",
    "TransactionConflictError",
    "TransactionStepError",
    "UnknownCodecError",
    "UnknownWorkflowError",
    "EncryptionKeyError",
    "ErasedValueError",
    "UpdateConflictError",
    "UpdateNotHandledError",
    "UpdateRejectedError",
    "UpdateTimeoutError",
    "ValueTooLargeError",
    "ValueRefusedError",
    "WaitTimeoutError",
    "WorkerStartError",
    "WorkflowCancelledError",
    "WorkflowConflictError",
    "WorkflowFailedError",
    "WorkflowNotFinishedError",
    "NonRetryableError",
    "StepTimeoutError",
    "WorkflowNotFoundError",
    "WorkflowTimeoutError",
    "is_retryable",
    "leaf_errors",
    "sole_error",
]


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """The exceptions ``exc`` stands for: itself, or the leaves of an exception group (a task
    group's, nested groups flattened), in order."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(leaf_errors(inner))
        return leaves
    return [exc]


def sole_error(exc: BaseException) -> BaseException:
    """The one exception an exception group stands for (a task group one branch of which
    failed), else ``exc`` itself: what a rule that reads an error's type reads."""
    leaves = leaf_errors(exc)
    return leaves[0] if len(leaves) == 1 else exc


def is_retryable(exc: BaseException) -> bool:
    """Whether running again could end otherwise: not when ``exc`` (or, for an exception
    group, any exception in it) is a :class:`FrameworkError` marked not retryable."""
    return all(not isinstance(leaf, FrameworkError) or leaf.retryable for leaf in leaf_errors(exc))
