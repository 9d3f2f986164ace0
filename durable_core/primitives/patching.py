"""Changing a workflow's code while instances are in flight: patch markers.

Temporal's model on a positional journal. ``patched("id")`` stands at a step index
like any step. The first run to reach it records a marker step
(``durable.patch:<id>``) there and takes the new branch; a replay finds the marker
and takes it again. A replay that finds some other step at that index (the old
code ran there before the change) takes the old branch, and the index is not used
up: the old branch's own steps replay from it. A workflow whose history ends
before that index has not got there yet, so it takes the new branch.

Once no instance can take the old branch any more, replace ``if patched(id):``
by ``deprecate_patch(id)`` and drop the old branch: instances that recorded the
marker still replay; later runs record nothing. When none of those is left,
remove the call.
"""

from __future__ import annotations

from ..errors import ConfigurationError
from ..runtime.context import body_context

PATCH_PREFIX = "durable.patch:"
MAX_PATCH_ID = 200


def _marker(patch_id: str) -> str:
    if not patch_id or len(patch_id) > MAX_PATCH_ID:
        raise ConfigurationError(
            f"a patch id is 1 to {MAX_PATCH_ID} characters, got {len(patch_id)}"
        )
    return PATCH_PREFIX + patch_id


async def patched(patch_id: str) -> bool:
    """Whether this run takes the new branch of the change named ``patch_id``.

    In a workflow body: ``True`` for a run that first reaches this point under the
    code that calls it (the marker is recorded), ``False`` for one whose history
    shows the old code ran here. The answer is the same for every call with this id
    in one run. Outside a workflow (a body called inline) there is no history: ``True``.
    """
    name = _marker(patch_id)
    ctx = body_context("patched()")
    if ctx is None:
        return True
    return await ctx.run.patched(patch_id, name)


async def deprecate_patch(patch_id: str) -> None:
    """Mark where ``if patched(patch_id):`` stood once its old branch is gone: a history
    with the marker replays past it; a run without one records nothing."""
    name = _marker(patch_id)
    ctx = body_context("deprecate_patch()")
    if ctx is not None:
        ctx.run.deprecate_patch(patch_id, name)
