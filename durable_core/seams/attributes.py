"""The store's role for searchable attributes (schema version 9), and the rules of their
names and values.

A workflow's attributes are typed values under names (``customer="acme"``,
``amount=120.5``, ``rush=True``) that a body or a caller sets and a list filters by,
through an index of the ``workflow_attributes`` table rather than a scan of the
workflows. A value is text (at most :data:`MAX_TEXT` characters), a number (an ``int``
or a finite ``float``, kept as a double) or a bool; ``None`` removes the name. A filter
matches values of its own type only: ``amount=10`` finds the number 10, not the text
``"10"``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..errors import AttributesNotSupportedError, ConfigurationError
from .records import Lease, WorkflowRecord, WorkflowStatus, check_storable

AttributeValue = str | int | float | bool
"""What an attribute holds: text, a number or a bool."""

MAX_NAME = 64
"""The longest attribute name."""
MAX_TEXT = 255
"""The longest text value."""
MAX_PER_CALL = 64
"""The most attributes one call sets."""
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
"""What an attribute name looks like: a letter or ``_``, then letters, digits, ``_ . -``."""
EXACT_NUMBER = 2**53
"""Integers beyond this many are not kept exactly by a double: they are refused."""


@dataclass(frozen=True, slots=True)
class AttributeRange:
    """A filter of numbers between ``min`` and ``max``, both inclusive (``None``: unbounded
    on that side): ``list_workflows(attributes={"amount": AttributeRange(10, 100)})``."""

    min: int | float | None = None
    max: int | float | None = None

    def __post_init__(self) -> None:
        for end in (self.min, self.max):
            if end is not None:
                _number("an AttributeRange end", end)
        if self.min is None and self.max is None:
            raise ConfigurationError("an AttributeRange needs a min, a max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ConfigurationError(
                f"an AttributeRange's min {self.min} is above its max {self.max}"
            )


AttributeFilter = AttributeValue | AttributeRange
"""What a list filters one attribute by: a value it equals, or a range of numbers."""


def kind_of(value: AttributeValue) -> str:
    """``"text"``, ``"number"`` or ``"bool"``: the column ``value`` is kept in."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "text"
    return "number"


def check_name(name: Any) -> str:
    """``name`` if it can name an attribute, else a :class:`ConfigurationError` saying why."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise ConfigurationError(
            f"an attribute name is 1 to {MAX_NAME} letters, digits, '_', '.' or '-', "
            f"starting with a letter or '_'; got {name!r:.80}"
        )
    return name


def _number(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{what} is a number, got {type(value).__name__} {value!r:.80}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigurationError(f"{what} is a finite number, got {value!r}")
    if isinstance(value, int) and abs(value) > EXACT_NUMBER:
        raise ConfigurationError(
            f"{what} is a number kept as a double: an int of at most 2**53 in size, got {value}"
        )
    return float(value)


def check_value(name: str, value: Any) -> AttributeValue:
    """``value`` if attribute ``name`` can hold it, else a :class:`ConfigurationError`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        check_storable(f"attribute {name!r}", value)
        if len(value) > MAX_TEXT:
            raise ConfigurationError(
                f"attribute {name!r}: a text value is at most {MAX_TEXT} characters, "
                f"got {len(value)}"
            )
        return value
    if isinstance(value, int | float):
        _number(f"attribute {name!r}", value)
        return value
    raise ConfigurationError(
        f"attribute {name!r}: a value is a str, an int, a float or a bool (None removes it), "
        f"got {type(value).__name__}"
    )


def check_attributes(values: Mapping[str, Any]) -> dict[str, AttributeValue | None]:
    """``values`` checked (names and values; ``None`` removes a name), or a
    :class:`ConfigurationError` naming the first problem."""
    if not isinstance(values, Mapping):
        raise ConfigurationError(f"attributes are a mapping of names to values, got {values!r:.80}")
    if len(values) > MAX_PER_CALL:
        raise ConfigurationError(
            f"at most {MAX_PER_CALL} attributes are set at once, got {len(values)}"
        )
    return {
        check_name(name): None if value is None else check_value(name, value)
        for name, value in values.items()
    }


def check_filters(filters: Mapping[str, Any]) -> dict[str, AttributeFilter]:
    """``filters`` checked (each a value or an :class:`AttributeRange`), or a
    :class:`ConfigurationError`."""
    if not isinstance(filters, Mapping) or not filters:
        raise ConfigurationError(
            f"attribute filters are a non-empty mapping of names to values, got {filters!r:.80}"
        )
    if len(filters) > MAX_PER_CALL:
        raise ConfigurationError(f"at most {MAX_PER_CALL} attribute filters, got {len(filters)}")
    return {
        check_name(name): wanted
        if isinstance(wanted, AttributeRange)
        else check_value(name, wanted)
        for name, wanted in filters.items()
    }


def parse_filter(term: str) -> tuple[str, AttributeFilter]:
    """``NAME=VALUE`` as a filter (``durable list --attr``, the dashboard): ``VALUE`` is a
    number (``12.5``), ``true`` or ``false``, a range of numbers ``LOW..HIGH`` (either end
    may be left out), a JSON string (``"02139"``: text that looks like a number), or else
    the text as written. A :class:`ConfigurationError` says what is wrong."""
    name, equals, text = term.partition("=")
    name = name.strip()
    if not equals or not name:
        raise ConfigurationError(f"an attribute filter is NAME=VALUE, got {term!r:.80}")
    check_name(name)
    low, dots, high = text.partition("..")
    if dots:
        ends = [_parsed_number(name, end.strip()) if end.strip() else None for end in (low, high)]
        if ends[0] is None and ends[1] is None:
            raise ConfigurationError(f"attribute {name!r}: a range LOW..HIGH needs an end")
        return name, AttributeRange(ends[0], ends[1])
    if text in ("true", "false"):
        return name, text == "true"
    try:
        parsed = json.loads(text)
    except ValueError:
        return name, check_value(name, text)
    if isinstance(parsed, str | int | float) and not isinstance(parsed, bool):
        return name, check_value(name, parsed)
    return name, check_value(name, text)


def filter_term(name: str, value: AttributeValue) -> str | None:
    """The ``NAME=VALUE`` term :func:`parse_filter` reads back as ``value`` (text that
    would read as another type goes in JSON quotes), or ``None`` for text no term of a
    comma-separated list holds (a comma, or ``..``)."""
    if isinstance(value, bool):
        return f"{name}={'true' if value else 'false'}"
    if not isinstance(value, str):
        return f"{name}={value!r}"
    if "," in value or ".." in value:
        return None
    plain = f"{name}={value}"
    read = parse_filter(plain)[1]
    return plain if isinstance(read, str) and read == value else f"{name}={json.dumps(value)}"


def _parsed_number(name: str, text: str) -> int | float:
    try:
        number = json.loads(text)
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ConfigurationError(f"attribute {name!r}: a range's end is a number, got {text!r}")
    _number(f"attribute {name!r}", number)
    return number


def attributes_of(store: Any) -> Attributes:
    """``store`` as an :class:`Attributes`, or an
    :class:`~durable_core.errors.AttributesNotSupportedError`."""
    if not isinstance(store, Attributes):
        description = getattr(store, "description", type(store).__name__)
        raise AttributesNotSupportedError(
            f"{description} keeps no searchable attributes (it is not an Attributes store)"
        )
    return store


@runtime_checkable
class Attributes(Protocol):
    """A store that keeps workflows' searchable attributes and lists workflows by them
    (schema version 9). A workflow started with ``NewWorkflow.attributes`` has them
    written with its row."""

    async def record_attributes(
        self,
        lease: Lease,
        values: Mapping[str, AttributeValue | None],
        step_index: int,
        step_name: str,
        input: str,
        *,
        path: str | None = None,
    ) -> None:
        """Set (``None``: remove) the held workflow's attributes and record the setting call's
        step, in one transaction fenced by ``lease``."""
        ...

    async def set_attributes(
        self, workflow_id: str, values: Mapping[str, AttributeValue | None]
    ) -> None:
        """Set (``None``: remove) ``workflow_id``'s attributes, whatever its state; raises
        :class:`~durable_core.errors.WorkflowNotFoundError` for an unknown workflow."""
        ...

    async def get_attributes(self, workflow_id: str) -> dict[str, AttributeValue]:
        """``workflow_id``'s attributes, by name (empty for an unknown workflow)."""
        ...

    async def list_by_attributes(
        self,
        attributes: Mapping[str, AttributeFilter],
        *,
        status: WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        queue: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: str | None = None,
        error_type: str | None = None,
    ) -> list[WorkflowRecord]:
        """``Store.list_workflows`` of the workflows whose attributes match every filter of
        ``attributes`` (a value equal, or an :class:`AttributeRange`), newest first, found
        through the attributes' indexes."""
        ...


__all__: Sequence[str] = [
    "AttributeFilter",
    "AttributeRange",
    "AttributeValue",
    "Attributes",
    "attributes_of",
    "check_attributes",
    "check_filters",
    "parse_filter",
]
