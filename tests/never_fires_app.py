"""A workflow module declaring a schedule that never fires: importing it must fail in one line."""

from durable_core import workflow


@workflow(schedule="0 0 30 2 *")
async def on_february_30() -> None:
    return None
