"""Searchable attributes from a workflow body: ``await set_attributes(customer="acme")``.

The values are written in the transaction that records the call, once per call site:
a replayed or retried body finds the call recorded and writes nothing again. A caller
sets them with ``handle.set_attributes(...)`` or starts a workflow with them
(``client.with_options(attributes={...})``); ``list_workflows(attributes=...)``,
``durable list --attr`` and the dashboard list by them (see
:mod:`durable_core.seams.attributes` for names, types and filters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import FrameworkError
from ..runtime.context import body_context
from ..seams.attributes import AttributeValue, check_attributes


def merged(values: Mapping[str, Any] | None, more: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` and the keyword arguments ``more`` as one mapping (``more`` wins)."""
    return {**(values or {}), **more}


async def set_attributes(
    values: Mapping[str, AttributeValue | None] | None = None, /, **more: AttributeValue | None
) -> None:
    """Set this workflow's searchable attributes: ``set_attributes(customer="acme",
    amount=120.5)`` or ``set_attributes({"order.total": 120.5})``; ``None`` removes a name.
    A value is a ``str`` (up to 255 characters), an ``int``, a ``float`` or a ``bool``.
    Works in a workflow body only; a replay writes nothing again."""
    ctx = body_context("set_attributes()")
    if ctx is None:
        raise FrameworkError(
            "set_attributes() works only in a workflow body; a caller uses "
            "handle.set_attributes() or client.set_attributes()"
        )
    await ctx.run.set_attributes(check_attributes(merged(values, more)))
