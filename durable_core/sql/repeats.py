"""Starting a workflow at most once: the rule for a start that repeats an existing id.

A start under an id that exists already is the same start again, and writes
nothing, when it names the same workflow with the same input (the same values: an
encrypting codec writes the same input as another text each time); otherwise it is a
conflict and the whole batch is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..codec.formats import same_stored
from ..errors import WorkflowConflictError
from ..seams.records import NewWorkflow
from .connector import Row


def unique_starts(workflows: Sequence[NewWorkflow]) -> list[NewWorkflow]:
    """``workflows`` with repeats of one id dropped (a repeat must be the same start)."""
    seen: dict[str, NewWorkflow] = {}
    for row in workflows:
        first = seen.setdefault(row.id, row)
        if first is not row:
            check_repeats([row], [{"id": first.id, "name": first.name, "input": first.input}])
    return list(seen.values())


def check_repeats(rows: Sequence[NewWorkflow], existing: Sequence[Row]) -> None:
    """Raise unless each of ``rows`` whose id is in ``existing`` repeats that start exactly."""
    found = {row["id"]: row for row in existing}
    for row in rows:
        old = found.get(row.id)
        if old is None:
            continue
        if old["name"] != row.name:
            raise WorkflowConflictError(
                f"workflow id {row.id!r} is taken by workflow {old['name']}; "
                f"cannot start {row.name} under it"
            )
        if old["input"] != row.input and not same_stored(old["input"], row.input):
            raise WorkflowConflictError(
                f"workflow {row.name} {row.id!r} was started with arguments {old['input']}; "
                f"cannot start it again with {row.input}"
            )
