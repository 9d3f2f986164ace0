"""The bound on a worker process told to stop at once.

A second SIGTERM or SIGINT (or a supervisor's ``abandon``) cancels the in-flight workflows
(:meth:`~durable_core.runtime.worker.WorkflowWorker.abandon`), their shielded work
included. What no cancellation reaches (a step that swallows it, a clean-up shielded
for longer, a thread, a blocked event loop) must not keep the process alive:
:func:`exit_soon` ends it :data:`ABANDON_GRACE_SECS` later unless it has ended by then,
as a SIGKILL would. Nothing committed is lost; the leases of the workflows it held expire
and another worker reclaims them.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from ..redaction import get_logger

logger = get_logger("durable_core.worker")

ABANDON_GRACE_SECS = 0.5
"""How long a process told to stop at once has to end by itself before it is ended (it
takes a few tens of milliseconds when cancelling reaches everything)."""


def exit_soon(why: str, seconds: float = ABANDON_GRACE_SECS) -> threading.Timer:
    """End the process (``os._exit(1)``, logged) ``seconds`` from now unless it has ended by
    then; from a thread of its own, so a blocked event loop cannot hold it up."""

    def hard_exit() -> None:
        logger.warning(
            "%s %.1fs ago and the process still runs: exiting now; the leases of its "
            "in-flight workflows expire and another worker reclaims them",
            why,
            seconds,
        )
        logging.shutdown()
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()
    return timer
