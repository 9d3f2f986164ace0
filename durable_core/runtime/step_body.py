"""``StepBody``: what an attempt runs of a step (its name, retry policy and function)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..definitions.retry import RetryPolicy


class StepBody(Protocol):
    """What the attempt runs of a step (a :class:`~durable_core.primitives.steps.Step`)."""

    @property
    def name(self) -> str: ...

    @property
    def retry(self) -> RetryPolicy | None: ...

    @property
    def direct(self) -> Callable[..., Awaitable[Any]] | None:
        """What to await in place of :meth:`run_body` when that is all it does, else ``None``."""
        ...

    async def run_body(self, *args: Any, **kwargs: Any) -> Any:
        """Run the step's function once, bounded by its timeout."""
        ...
