"""``Attempt``: the one door between a running workflow body and the world.

Every effect of a body goes through its attempt and nowhere else: steps, waits,
messages, events, child starts, schedule changes, patches, ``now()`` and
``random()``. The attempt owns what they share: the journal (where each call
stands, what a replay returns), the lease (renewals, fencing, loss), the body's
cancel scope, the writes (to the store, or through a group commit) in the order
their durability needs, and how the attempt ended (:class:`Ending`, decided once).

Each primitive is one method of it (here, or in its parts: :mod:`.waits`,
:mod:`.effects`, :mod:`.compensation`, :mod:`.transactions`); the public functions
(:func:`durable_core.sleep`, :func:`durable_core.recv`, ...) only check their arguments
and call it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, cast

import anyio
import anyio.lowlevel

from ..codec import decode, encode, encode_arguments, same_arguments
from ..codec.failures import dump_error, error_record
from ..definitions.retry import RetryPolicy
from ..durations import utcnow
from ..errors import FrameworkError, LeaseLostError, StoreUnavailableError
from ..redaction import get_logger
from ..seams.events import AttemptEvent
from ..seams.plugins import observers, observing
from ..seams.records import ClaimedWorkflow, StepStatus, Wait, WaitKind
from ..seams.store import AttemptStore, Store
from .branches import branch_var, current_task
from .compensation import Sagas, compensating
from .config import WorkflowConfig
from .effects import Effects
from .endings import Ending
from .group_commit import GroupCommit
from .in_step import enter_step, leave_step
from .journal import NEW, Call, Journal
from .outages import retry_log_level
from .step_body import StepBody
from .suspension import Suspension, stopped
from .transactions import Transactions
from .waits import Waits


class Keeper(Protocol):
    """What renews an attempt's lease (a :class:`~durable_core.runtime.leases.LeaseKeeper`)."""

    def keeps(self, attempt: Attempt) -> bool:
        """Whether ``attempt``'s lease is still renewed there."""
        ...


logger = get_logger("durable_core.worker")

T = TypeVar("T")

_MAX_STORE_BACKOFF = 2.0

SUSPEND_RETRY_AFTER = 5.0
"""A step retry due later than this many seconds waits as a durable wait (the workflow
suspends once nothing else runs) instead of holding its worker slot."""


class ReplayStopped(BaseException):
    """Ends a branch of a replay check that went as far as its history goes."""


class Attempt(Waits, Effects, Sagas, Transactions):
    """One attempt of one claimed workflow, from its claim to its settlement; its waits are
    :class:`~durable_core.runtime.waits.Waits`, its effects beyond steps and waits
    :class:`~durable_core.runtime.effects.Effects`, its sagas' calls
    :class:`~durable_core.runtime.compensation.Sagas`, its transaction steps
    :class:`~durable_core.runtime.transactions.Transactions`."""

    def __init__(
        self,
        store: Store,
        config: WorkflowConfig,
        claimed: ClaimedWorkflow,
        clock: Callable[[], datetime] = utcnow,
        group: GroupCommit | None = None,
    ) -> None:
        self.store = store
        self.group = group
        self.writes: AttemptStore = store if group is None else group
        """What step rows and the settlement go through (the store, or a group commit)."""
        self.config = config
        self.claimed = claimed
        self.clock = clock
        """The time durable waits measure deadlines by (a test's clock in the runner)."""
        self.lease = claimed.lease
        self.fields: dict[str, Any] = {
            "worker_id": claimed.lease.worker_id,
            "workflow_id": claimed.id,
            "attempts": claimed.attempts,
            "max_attempts": claimed.max_attempts,
        }
        """What every log record of this attempt carries."""
        self.journal = Journal(claimed.name)
        self.failed_step: tuple[int, str] | None = None
        """The step the attempt failed in, recorded with its error."""
        self.lease_deadline = time.monotonic() + config.lock_timeout_secs
        self.renew_at = anyio.current_time() + config.heartbeat_interval
        self.ending: Ending | None = None
        """How the attempt ended, once something other than the body's end decided it."""
        self.suspended: list[Wait] = []
        """What the attempt suspended on, once it has."""
        self.policy: RetryPolicy | None = None
        """The workflow's retry policy (``None``: linear backoff, the configured budget)."""
        self.given_up: list[BaseException] = []
        """Errors a step's retry policy gave up on: if one fails the body, no attempt follows."""
        self.body_scope = anyio.CancelScope()
        self.patches: dict[str, bool] = {}
        """Each patch id's answer in this attempt (see :mod:`durable_core.primitives.patching`)."""
        self.calls = Suspension(self._suspend, clock, config.poll_interval, self._ready)
        """The durable calls in flight, and when they suspend the workflow."""
        self.replaying = False
        """A replay check (:mod:`durable_core.runtime.replay`): nothing runs and nothing is written;
        a branch stops at its first call the history does not end."""
        self.replay_over: anyio.Event | None = None
        """In a replay check: set once every branch has gone as far as its history goes."""

    @functools.cached_property
    def event(self) -> AttemptEvent:
        """What every observer event of this attempt receives as ``attempt`` (built when an
        observer first needs it)."""
        claimed = self.claimed
        return AttemptEvent(
            worker_id=claimed.lease.worker_id,
            workflow_id=claimed.id,
            workflow_name=claimed.name,
            attempts=claimed.attempts,
            max_attempts=claimed.max_attempts,
        )

    # -- the history ----------------------------------------------------------------------------

    async def load_history(self) -> None:
        """Read the recorded calls (unless the claim brought them along)."""
        steps = self.claimed.steps
        if steps is None:
            workflow_id = self.claimed.id
            steps = tuple(await self.persist(lambda: self.store.load_steps(workflow_id)))
        self.journal = Journal(f"{self.claimed.name} ({self.claimed.id})", steps)

    def _call(
        self, name: str, input_json: str | None = None, *, step: bool = False, at: str | None = None
    ) -> Call:
        """The next call of the running branch (or the call at the path ``at``), checked
        against the journal."""
        call = self.journal.call(name, at=at)
        try:
            self.journal.check(call, input_json, step=step)
        except FrameworkError:
            self.failed_step = (call.index, name)  # recorded against this call
            raise
        return call

    # -- the door: what a body does -------------------------------------------------------------

    async def run_step(
        self, step: StepBody, args: tuple[Any, ...], kwargs: Any, *, at: str | None = None
    ) -> Any:
        """Run ``step`` durably: its recorded output on a replay, else its body, retried by
        its policy, with each try and its end recorded (at the path ``at``: a saga's)."""
        call = self.journal.call(step.name, at=at)
        input_json, value = self._step_input(call, args, kwargs)
        if value is not NEW:
            return value
        if self.replaying:
            await self.past_history()
        await self._enter(call)
        try:
            tries = await self._first_try(call, input_json)
            group = self.group
            while True:
                # The short path: a start that need not wait is recorded at once.
                if (
                    self.ending is not None
                    or group is None
                    or not group.began_now(
                        self.lease, call.index, call.name, input_json, call.stored_path
                    )
                ):
                    await self.persist(
                        lambda: self.writes.start_step(
                            self.lease, call.index, call.name, input_json, path=call.stored_path
                        )
                    )
                if observing():
                    observers().durable_step_started(
                        attempt=self.event,
                        step_index=call.index,
                        step_name=call.name,
                        step_attempt=tries,
                    )
                token = enter_step()
                try:
                    direct = step.direct
                    result = await (
                        step.run_body(*args, **kwargs)
                        if direct is None
                        else direct(*args, **kwargs)
                    )
                    output = encode(
                        result, what=f"output of step {step.name!r} (index {call.index})"
                    )
                except Exception as exc:
                    await self._step_failed(call, exc)
                    await self._next_try(call, input_json, step.retry, exc, tries)
                    tries += 1
                    continue
                finally:
                    leave_step(token)
                self.failed_step = None  # a step retried to success is not the one that failed
                if (
                    self.ending is not None
                    or group is None
                    or not group.completed_now(self.lease, call.index, output)
                ):
                    await self.persist(
                        functools.partial(self.writes.complete_step, self.lease, call.index, output)
                    )
                self._recorded(call)
                return result
        finally:
            self._leave(call)

    def _step_input(self, call: Call, args: tuple[Any, ...], kwargs: Any) -> tuple[str, Any]:
        """A step call's input JSON, checked against what the journal holds at its path, and
        its recorded output when a replay returns it (else :data:`NEW`)."""
        what = f"input of step {call.name!r} (index {call.index})"
        try:
            # A recorded input is compared with this one written by the same codec.
            like = None if call.recorded is None else call.recorded.input
            input_json = encode_arguments(args, kwargs, what=what, like=like)
            if like is not None and input_json != like and same_arguments(like, args, kwargs):
                input_json = like  # the same values, stored before a class was renamed
            if call.recorded is not None:
                self.journal.check(call, input_json, step=True)
                if call.output is not None:
                    value = decode(call.output, what=f"cached output of step {call.name!r}")
                    self._replayed(call)
                    return input_json, value
        except FrameworkError:
            self.failed_step = (call.index, call.name)
            raise
        return input_json, NEW

    async def _first_try(self, call: Call, input_json: str) -> int:
        """The number of the step's first try in this attempt: 1, or the one after the
        retry an earlier attempt was waiting for (waited out first)."""
        recorded = call.recorded
        if recorded is None or recorded.status is not StepStatus.WAITING:
            return 1
        state = json.loads(recorded.output or "{}")
        tries = int(state["tries"])
        await self._retry_wait(call, input_json, tries, datetime.fromisoformat(state["deadline"]))
        return tries + 1

    async def _next_try(
        self,
        call: Call,
        input_json: str,
        policy: RetryPolicy | None,
        error: BaseException,
        tries: int,
    ) -> None:
        """After the ``tries``-th try of a step failed with ``error``: raise it when
        ``policy`` gives up (a step's policy decides: if it escapes, the workflow fails),
        else return when the next try is due (a durable wait when that is far)."""
        if policy is None:
            raise error
        if not policy.retries(error) or tries >= policy.max_attempts:
            self.given_up.append(error)
            raise error
        delay = policy.delay(tries)
        if delay > SUSPEND_RETRY_AFTER and not compensating.get():
            deadline = self.clock() + timedelta(seconds=delay)
            await self._retry_wait(call, input_json, tries, deadline)
        else:
            await anyio.sleep(delay)

    async def effect(
        self,
        name: str,
        input_json: str,
        act: Callable[[Call], Awaitable[str]],
        *,
        records: bool = False,
    ) -> str:
        """Act once for this call site (``act(call)`` returns the output JSON to record;
        ``records``: ``act`` records it itself, in the transaction that acts); a replay
        returns the recorded output without acting. It acts only once every write before
        it has committed, so nothing it starts or sends can outlive a step it depends on."""
        return await self._act(self._call(name), input_json, act, records=records)

    async def _act(
        self,
        call: Call,
        input_json: str,
        act: Callable[[Call], Awaitable[str]],
        *,
        records: bool = False,
    ) -> str:
        """:meth:`effect` for the call ``call``."""
        if call.output is not None:
            self._replayed(call)
            return call.output
        if self.replaying:
            await self.past_history()
        await self._enter(call)
        try:
            await self._committed()
            output = await self.persist(lambda: act(call))
            if records:
                self._recorded(call)
            else:
                await self._record(call, input_json, output)
            return output
        finally:
            self._leave(call)

    # -- what the door does for each call -------------------------------------------------------

    def _replayed(self, call: Call) -> None:
        observers().durable_step_succeeded(
            attempt=self.event, step_index=call.index, step_name=call.name, cached=True
        )

    def _recorded(self, call: Call) -> None:
        if observing():
            observers().durable_step_succeeded(
                attempt=self.event, step_index=call.index, step_name=call.name, cached=False
            )

    async def _record(self, call: Call, input_json: str, output: str) -> None:
        """Record a durable primitive's output as its call's (in one write)."""
        await self.persist(
            lambda: self.writes.record_step(
                self.lease, call.index, call.name, input_json, output, path=call.stored_path
            )
        )
        self._recorded(call)

    async def _step_failed(self, call: Call, exc: Exception) -> None:
        self.failed_step = (call.index, call.name)
        error = dump_error(error_record(exc, step_index=call.index, step_name=call.name))
        await self.persist(lambda: self.writes.fail_step(self.lease, call.index, error))
        observers().durable_step_failed(
            attempt=self.event, step_index=call.index, step_name=call.name, error=exc
        )

    async def _retry_wait(
        self, call: Call, input_json: str, tries: int, deadline: datetime
    ) -> None:
        """Until a step's next try is due, as a durable wait (the step's row keeps the try
        count and the deadline)."""
        state = json.dumps({"deadline": deadline.isoformat(), "tries": tries})
        wait = Wait(
            WaitKind.RETRY,
            call.name,
            deadline,
            call.index,
            call.name,
            input_json,
            step_output=state,
            step_path=call.stored_path,
        )
        while self.clock() < deadline:
            await self.calls.block(call.path, wait)

    def _ready(self) -> bool:
        """Whether a branch of the body other than the running one is ready to run."""
        return self.journal.ready(current_task())

    async def past_history(self) -> None:
        """A replay check reached a call its history has not ended: this branch goes no
        further. It waits until the check is over, then unwinds (whatever shields it)."""
        over = self.replay_over
        if over is not None:
            await over.wait()
        raise ReplayStopped()

    async def _enter(self, call: Call) -> None:
        """The durable call ``call`` begins; none may once the attempt has ended (or its body
        has: a task the body left behind). Tasks its branch creates until :meth:`_leave` are
        no branches (a step's own, a driver's)."""
        if not compensating.get():
            self._halted()
            if self.ending is not None:
                await stopped()
        if self.calls.closed:
            await stopped()
        calls = self.calls
        if calls.deciding:
            await calls.enter()
            if self.ending is not None:
                calls.leave()
                await stopped()
        else:
            calls.busy += 1
        if call.branch is not None:
            call.branch.quiet += 1

    def _leave(self, call: Call) -> None:
        if call.branch is not None:
            call.branch.quiet -= 1
        calls = self.calls
        calls.busy -= 1
        if calls.blocked and not calls.busy:
            calls.leave_idle()

    async def _committed(self) -> None:
        """Return once every write this attempt made has committed."""
        if self.group is not None:
            await self.persist(lambda: cast(GroupCommit, self.group).committed(self.lease))

    committed = _committed

    async def _suspend(self, waits: list[Wait]) -> bool:
        """Leave the workflow waiting on ``waits`` and stop the body; ``False`` when one
        of them is over already. The workflow's own deadline, when sooner, ends each."""
        deadline = self.claimed.deadline
        if deadline is not None:
            waits = [
                dataclasses.replace(wait, deadline=deadline)
                if wait.deadline is None or deadline < wait.deadline
                else wait
                for wait in waits
            ]
        if not await self.persist(lambda: self.writes.suspend(self.lease, waits)):
            return False
        self.suspended = waits
        self.end(Ending.SUSPENDED)
        return True

    # -- the lease and the end ------------------------------------------------------------------

    def end(self, ending: Ending) -> None:
        """The attempt ended as ``ending`` (the first ending decided stands): stop the body."""
        if self.ending is None:
            self.ending = ending
        self.body_scope.cancel()

    def cancel(self) -> None:
        """Stop the body at once: the workflow was cancelled."""
        self.end(Ending.CANCELLED)

    async def persist(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run a store write, retrying while the database is unreachable and the lease lasts.

        A refused write (the lease is gone) ends the attempt: in the body, the body is
        stopped as anyio cancels it; elsewhere :class:`LeaseLostError` is raised. Tasks a
        driver creates meanwhile are no branches of the body (a replay makes no write)."""
        branch = branch_var.get()
        if branch is not None:
            branch.quiet += 1
        try:
            delay = 0.05
            while True:
                if self.ending is Ending.LEASE_LOST:
                    raise LeaseLostError(
                        f"worker {self.lease.worker_id} lost the lease on workflow "
                        f"{self.claimed.id}"
                    )
                try:
                    return await operation()
                except StoreUnavailableError as exc:
                    if time.monotonic() + delay >= self.lease_deadline:
                        raise
                    logger.log(
                        retry_log_level(exc),
                        "store unavailable, retrying in %.2fs: %s",
                        delay,
                        exc,
                        extra=self.fields,
                    )
                    await anyio.sleep(delay)
                    delay = min(delay * 2, _MAX_STORE_BACKOFF)
                except LeaseLostError:
                    self.end(Ending.LEASE_LOST)
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    raise
        finally:
            if branch is not None:
                branch.quiet -= 1

    async def renew(self, keeper: Keeper) -> None:
        """Renew the lease once; on its loss, end the attempt. Then schedule the next renewal."""
        config = self.config
        try:
            await self.store.heartbeat(self.lease, config.lock_timeout_secs)
        except LeaseLostError:
            if keeper.keeps(self):
                self.end(Ending.LEASE_LOST)
            return
        except StoreUnavailableError as exc:
            logger.log(
                retry_log_level(exc), "lease renewal failed, will retry: %s", exc, extra=self.fields
            )
        except Exception:
            logger.exception("lease renewal failed, will retry", extra=self.fields)
        else:
            self.lease_deadline = time.monotonic() + config.lock_timeout_secs
            try:
                await self.hear_cancel()
            except FrameworkError as exc:
                logger.warning("could not ask for a cancel request: %s", exc, extra=self.fields)
        self.renew_at = anyio.current_time() + config.heartbeat_interval

    def past_deadline(self) -> bool:
        """Whether the workflow's timeout has passed."""
        left = self.seconds_left()
        return left is not None and left <= 0

    def seconds_left(self) -> float | None:
        """Seconds until the workflow's timeout, if it has one."""
        deadline = self.claimed.deadline
        return None if deadline is None else (deadline - self.clock()).total_seconds()
