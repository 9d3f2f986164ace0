"""A workflow module with a name clash: `durable worker --app` must refuse to boot on it."""

from durable_core import workflow


@workflow(name="tests.clash")
async def first_definition() -> None:
    return None


@workflow(name="tests.clash")
async def second_definition() -> None:
    return None
