"""How the dashboard shows stored values: decoded from the real encoding, never imported."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from durable_core.codec import encode, encode_arguments
from durable_core.dashboard.present import duration, show_arguments, show_value


class Color(enum.Enum):
    RED = "red"


@dataclass
class Order:
    number: str
    lines: tuple[int, ...]
    color: Color


def test_values_show_decoded_without_importing_their_types() -> None:
    stored = encode({"order": Order("A-1", (1, 2), Color.RED), "raw": b"\x00", "n": None})
    shown = show_value(stored)
    assert shown == (
        '{"order": tests.test_dashboard_present.Order(number="A-1", lines=(1, 2), '
        'color=tests.test_dashboard_present.Color("red")), "raw": bytes(base64 AA==), '
        '"n": null}'
    )
    assert show_value(encode((7,))) == "(7,)"
    assert show_value(encode({1, 2})) == "set({1, 2})"
    assert show_value(None) == "" and show_value("not json") == "not json"
    custom = '{"__durable__":"custom","type":"money","data":["12.50","EUR"]}'
    assert show_value(custom) == 'money(["12.50", "EUR"])'
    assert show_value("@msgpack:gqFu") == "@msgpack:gqFu"  # another codec's text, as stored


def test_arguments_show_as_a_call() -> None:
    stored = encode_arguments(("A-17", 1999), {"express": True}, what="test")
    assert show_arguments(stored) == '("A-17", 1999, express=true)'


def test_durations_are_short() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert duration(start, start + timedelta(milliseconds=850)) == "850 ms"
    assert duration(start, start + timedelta(seconds=12.34)) == "12.3 s"
    assert duration(start, start + timedelta(seconds=245)) == "4 min 5 s"
    assert duration(start, start + timedelta(hours=2, minutes=10)) == "2 h 10 min"
    assert duration(start, None) == ""
