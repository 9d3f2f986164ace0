"""Tests for durable_core.codec: faithful round trips, refusals, decoding errors."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap
import types
import uuid
from collections import OrderedDict
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import msgspec
import pydantic
import pytest

from durable_core.codec import (
    TAG_KEY,
    convert,
    decode,
    decode_arguments,
    encode,
    encode_arguments,
)
from durable_core.errors import FrameworkError, SerializationError

MODULE = __name__

# ---------------------------------------------------------------------------------------------
# Module-level types (importable by module + qualname)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class FrozenPoint:
    x: float
    label: str = ""


@dataclasses.dataclass(eq=False)
class Unequal:
    """eq=False: instances compare by identity, so only field-by-field checks can pass."""

    items: list[int]
    when: datetime


@dataclasses.dataclass(slots=True)
class Slotted:
    a: tuple[int, ...]
    b: dict[int, str]


@dataclasses.dataclass
class WithDerived:
    base: int
    double: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.double = self.base * 2


@dataclasses.dataclass
class WithLateDefault:
    name: str
    note: str = dataclasses.field(init=False, default="unset")


@dataclasses.dataclass
class WithUnsetField:
    name: str
    note: str = dataclasses.field(init=False)


@dataclasses.dataclass
class Suffixing:
    """Not idempotent: reading it back would append another suffix."""

    name: str

    def __post_init__(self) -> None:
        self.name = self.name + "!"


@dataclasses.dataclass
class TagNamedField:
    __durable__: int = 0  # a dunder name is not mangled: the field is really "__durable__"
    other: str = ""


@dataclasses.dataclass
class Nested:
    point: Point
    points: list[Point]
    tags: frozenset[str]
    meta: dict[str, Any]


@dataclasses.dataclass
class User:
    name: str
    created: Any


class Color(enum.Enum):
    RED = "red"
    GREEN = (0, 255, 0)


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mode(enum.StrEnum):
    READ = "r"
    WRITE = "w"


class Perm(enum.Flag):
    R = 1
    W = 2


class Pair(NamedTuple):
    left: int
    right: str


class Wrapper(NamedTuple):
    pair: Pair
    extra: tuple[int, ...]


class Address(pydantic.BaseModel):
    street: str
    zip_code: str = pydantic.Field(alias="zipCode")


class Customer(pydantic.BaseModel):
    id: uuid.UUID
    name: str
    address: Address
    tags: set[str] = set()
    joined: datetime
    balance: Decimal
    history: list[tuple[int, str]] = []
    point: Point | None = None

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def upper_name(self) -> str:
        return self.name.upper()


class Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    value: int


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    value: int


class Anything(pydantic.BaseModel):
    payload: Any


class Scores(pydantic.RootModel[list[int]]):
    pass


class Opaque:
    """A plain class: not one of the supported kinds."""


class MyInt(int):
    pass


class FixedTz(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=1)

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "FIXED"


# ---------------------------------------------------------------------------------------------
# An independent structural comparison (does not reuse the module's own checker)
# ---------------------------------------------------------------------------------------------


def assert_identical(a: Any, b: Any, path: str = "value") -> None:
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, float):
        if math.isnan(a):
            assert math.isnan(b), path
        else:
            assert a == b and math.copysign(1, a) == math.copysign(1, b), f"{path}: {a} != {b}"
    elif isinstance(a, complex):
        assert_identical(a.real, b.real, f"{path}.real")
        assert_identical(a.imag, b.imag, f"{path}.imag")
    elif isinstance(a, Decimal):
        assert a.as_tuple() == b.as_tuple(), f"{path}: {a!r} != {b!r}"
    elif isinstance(a, enum.Enum):
        assert a is b, path
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_identical(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, pydantic.BaseModel):
        for name in type(a).model_fields:
            assert_identical(getattr(a, name), getattr(b, name), f"{path}.{name}")
        assert a.__pydantic_extra__ == b.__pydantic_extra__, path
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for (ka, xa), (kb, xb) in zip(a.items(), b.items(), strict=True):
            assert_identical(ka, kb, f"{path}<key>")
            assert_identical(xa, xb, f"{path}[{ka!r}]")
    elif isinstance(a, set | frozenset):
        assert a == b, path
        by_item = {y: y for y in b}
        for x in a:
            assert_identical(x, by_item[x], f"{path}<item>")
    elif isinstance(a, datetime | time):
        assert a.replace(tzinfo=None) == b.replace(tzinfo=None), path
        assert a.fold == b.fold, path
        assert a.utcoffset() == b.utcoffset(), path
        assert a.tzname() == b.tzname(), path
        assert type(a.tzinfo) is type(b.tzinfo), path
        if isinstance(a.tzinfo, ZoneInfo):
            assert isinstance(b.tzinfo, ZoneInfo)
            assert a.tzinfo.key == b.tzinfo.key, path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def roundtrip(value: Any) -> Any:
    text = encode(value, what="test value")
    assert isinstance(text, str)
    json.loads(text)  # always standard JSON (no NaN/Infinity literals)
    text.encode("utf-8")  # always storable as UTF-8
    return decode(text, what="test value")


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------

PARIS = ZoneInfo("Europe/Paris")

ROUNDTRIP_CASES: list[Any] = [
    pytest.param(None, id="none"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param(0, id="zero"),
    pytest.param(-17, id="negative-int"),
    pytest.param(2**64 + 1, id="int-over-64-bits"),
    pytest.param(10**5000 + 7, id="int-over-str-digit-limit"),
    pytest.param(-(10**5000), id="negative-huge-int"),
    pytest.param(1.5, id="float"),
    pytest.param(0.1 + 0.2, id="float-repr"),
    pytest.param(-0.0, id="negative-zero"),
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="inf"),
    pytest.param(float("-inf"), id="-inf"),
    pytest.param(1e308, id="big-float"),
    pytest.param(5e-324, id="denormal"),
    pytest.param(complex(1.5, -2), id="complex"),
    pytest.param(complex(float("nan"), float("inf")), id="complex-special"),
    pytest.param("", id="empty-str"),
    pytest.param("héllo wörld ✓ 日本 🎉", id="unicode"),
    pytest.param('quote" backslash\\ nul\x00 newline\n', id="escapes"),
    pytest.param("lone \ud800 surrogate", id="lone-surrogate"),
    pytest.param("__durable__", id="tag-as-str"),
    pytest.param(b"", id="empty-bytes"),
    pytest.param(bytes(range(256)), id="bytes"),
    pytest.param(bytearray(b"abc\x00"), id="bytearray"),
    pytest.param([], id="empty-list"),
    pytest.param([1, "a", None, [2.5, [True]]], id="nested-list"),
    pytest.param((), id="empty-tuple"),
    pytest.param((1, (2, (3, ())), [4, (5,)]), id="nested-tuples"),
    pytest.param({}, id="empty-dict"),
    pytest.param({"a": 1, "b": {"c": [1, 2]}}, id="str-dict"),
    pytest.param({"z": 1, "a": 2, "m": 3}, id="dict-order"),
    pytest.param({1: "one", 2: "two"}, id="int-keys"),
    pytest.param({(1, 2): "t", None: 0, True: "b", 2.5: "f"}, id="mixed-keys"),
    pytest.param({"1": "str", 1: "int"}, id="str-and-int-key"),
    pytest.param({TAG_KEY: "tuple", "items": [1, 2]}, id="tag-key-user-dict"),
    pytest.param({TAG_KEY: {TAG_KEY: 1}}, id="tag-key-nested"),
    pytest.param([{TAG_KEY: None}], id="tag-key-in-list"),
    pytest.param(set(), id="empty-set"),
    pytest.param({1, 2, 3}, id="int-set"),
    pytest.param({"b", "a", "c"}, id="str-set"),
    pytest.param({1, "1", (1,), None}, id="mixed-set"),
    pytest.param(frozenset(), id="empty-frozenset"),
    pytest.param(frozenset({frozenset({1}), frozenset({2, 3})}), id="nested-frozenset"),
    pytest.param({frozenset({"x"}): {1, 2}}, id="frozenset-key"),
    pytest.param(datetime(2024, 2, 29, 13, 14, 15, 123456), id="naive-datetime"),
    pytest.param(datetime(2024, 2, 29, 13, 14, 15, 1, tzinfo=UTC), id="utc-datetime"),
    pytest.param(
        datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))), id="offset-datetime"
    ),
    pytest.param(
        datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=-3), "BRT")), id="named-offset"
    ),
    pytest.param(
        datetime(2024, 1, 1, tzinfo=timezone(timedelta(seconds=1, microseconds=5))),
        id="subsecond-offset",
    ),
    pytest.param(datetime(2024, 7, 1, 12, tzinfo=PARIS), id="zoneinfo-datetime"),
    pytest.param(datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=1), id="zoneinfo-fold"),
    pytest.param(datetime(1, 1, 1), id="datetime-min"),
    pytest.param(datetime.max, id="datetime-max"),
    pytest.param(date(2024, 2, 29), id="date"),
    pytest.param(date(5, 1, 1), id="early-date"),
    pytest.param(time(23, 59, 59, 999999), id="time"),
    pytest.param(time(1, 2, tzinfo=timezone(timedelta(hours=2))), id="aware-time"),
    pytest.param(timedelta(days=-3, seconds=5, microseconds=7), id="timedelta"),
    pytest.param(timedelta(0), id="zero-timedelta"),
    pytest.param(uuid.UUID("12345678-1234-5678-1234-567812345678"), id="uuid"),
    pytest.param(Decimal("1.10"), id="decimal-trailing-zero"),
    pytest.param(Decimal("-0"), id="decimal-negative-zero"),
    pytest.param(Decimal("1E+3"), id="decimal-exponent"),
    pytest.param(Decimal("3.141592653589793238462643383279502884197"), id="decimal-precision"),
    pytest.param(Decimal("NaN"), id="decimal-nan"),
    pytest.param(Decimal("-Infinity"), id="decimal-inf"),
    pytest.param(Color.RED, id="enum"),
    pytest.param(Color.GREEN, id="enum-tuple-value"),
    pytest.param(Priority.HIGH, id="intenum"),
    pytest.param(Mode.WRITE, id="strenum"),
    pytest.param(Perm.R | Perm.W, id="flag-combination"),
    pytest.param({Priority.LOW: [Mode.READ]}, id="enum-key"),
    pytest.param(Point(1, 2), id="dataclass"),
    pytest.param(FrozenPoint(1.5, "p"), id="frozen-dataclass"),
    pytest.param({FrozenPoint(0.0), FrozenPoint(1.0)}, id="set-of-frozen-dataclasses"),
    pytest.param(Unequal([1, 2], datetime(2020, 1, 1)), id="eq-false-dataclass"),
    pytest.param(Slotted((1, 2), {3: "x"}), id="slots-dataclass"),
    pytest.param(WithDerived(21), id="init-false-derived"),
    pytest.param(TagNamedField(5, "x"), id="tag-named-field"),
    pytest.param(
        Nested(Point(0, 0), [Point(1, 1)], frozenset({"a", "b"}), {"when": date(2020, 1, 1)}),
        id="nested-dataclass",
    ),
    pytest.param(Pair(1, "a"), id="namedtuple"),
    pytest.param(Wrapper(Pair(2, "b"), (3, 4)), id="nested-namedtuple"),
    pytest.param(pathlib.PurePosixPath("/etc/passwd"), id="pureposixpath"),
    pytest.param(pathlib.PureWindowsPath(r"C:\Users\me"), id="purewindowspath"),
    pytest.param(pathlib.Path("relative/dir"), id="path"),
    pytest.param(
        Address.model_validate({"street": "Main", "zipCode": "12345"}), id="pydantic-alias"
    ),
    pytest.param(
        Customer(
            id=uuid.UUID(int=7),
            name="ada",
            address=Address(street="x", zipCode="1"),
            tags={"vip", "early"},
            joined=datetime(2021, 5, 6, 7, 8, 9, 10, tzinfo=PARIS),
            balance=Decimal("10.50"),
            history=[(1, "a")],
            point=Point(3, 4),
        ),
        id="pydantic-nested",
    ),
    pytest.param(Strict(value=3), id="pydantic-extra-forbid"),
    pytest.param(Loose.model_validate({"value": 1, "more": "x"}), id="pydantic-extra-allow"),
    pytest.param(Anything(payload={"a": (1, 2)}), id="pydantic-any-field"),
    pytest.param(Scores([1, 2, 3]), id="pydantic-rootmodel"),
    pytest.param(
        {"users": [User("a", datetime(2020, 1, 1)), User("b", {1, 2})], "n": (None,)},
        id="mixed-document",
    ),
]


@pytest.mark.parametrize("value", ROUNDTRIP_CASES)
def test_roundtrip_is_exact(value: Any) -> None:
    decoded = roundtrip(value)
    assert_identical(value, decoded)


@pytest.mark.parametrize("value", ROUNDTRIP_CASES)
def test_encoding_is_stable(value: Any) -> None:
    text = encode(value)
    assert encode(value) == text
    assert encode(decode(text)) == text


def test_natives_are_plain_compact_json() -> None:
    value = {"a": [1, 2.5, None, True, "é"], "b": {}}
    text = encode(value)
    assert text == '{"a":[1,2.5,null,true,"é"],"b":{}}'
    assert TAG_KEY not in text


def test_tagged_format() -> None:
    assert encode((1, 2)) == '{"__durable__":"tuple","items":[1,2]}'
    assert encode(Decimal("1.10")) == '{"__durable__":"decimal","value":"1.10"}'
    assert encode(float("nan")) == '{"__durable__":"float","value":"nan"}'
    assert json.loads(encode(Point(1, 2))) == {
        TAG_KEY: "dataclass",
        "type": f"{MODULE}:Point",
        "fields": {"x": 1, "y": 2},
    }
    assert json.loads(encode(Color.RED)) == {
        TAG_KEY: "enum",
        "type": f"{MODULE}:Color",
        "value": "red",
    }


def test_user_dict_that_looks_like_a_tag_stays_a_dict() -> None:
    value = {TAG_KEY: "tuple", "items": [1, 2]}
    decoded = decode(encode(value))
    assert type(decoded) is dict
    assert decoded == value


def test_decimal_keeps_its_exponent() -> None:
    decoded = decode(encode(Decimal("1.10")))
    assert isinstance(decoded, Decimal)
    assert str(decoded) == "1.10"


def test_zoneinfo_is_restored_by_key() -> None:
    decoded = decode(encode(datetime(2024, 7, 1, 12, tzinfo=PARIS)))
    assert isinstance(decoded, datetime)
    assert isinstance(decoded.tzinfo, ZoneInfo)
    assert decoded.tzinfo.key == "Europe/Paris"
    assert decoded.utcoffset() == timedelta(hours=2)


def test_utc_is_restored_as_the_utc_singleton() -> None:
    decoded = decode(encode(datetime(2024, 1, 1, tzinfo=UTC)))
    assert isinstance(decoded, datetime)
    assert decoded.tzinfo is UTC


def test_init_false_field_keeps_stored_value() -> None:
    value = WithLateDefault("n")
    value.note = "changed after construction"
    decoded = decode(encode(value))
    assert isinstance(decoded, WithLateDefault)
    assert decoded.note == "changed after construction"


def test_pydantic_computed_fields_are_not_stored() -> None:
    text = encode(
        Customer(
            id=uuid.UUID(int=1),
            name="x",
            address=Address(street="s", zipCode="z"),
            joined=datetime(2020, 1, 1),
            balance=Decimal(1),
        )
    )
    assert "upper_name" not in text
    decoded = decode(text)
    assert isinstance(decoded, Customer)
    assert decoded.upper_name == "X"


def test_lone_surrogate_text_is_utf8_storable() -> None:
    text = encode({"s": "a\udc80b"})
    text.encode("utf-8")
    assert decode(text) == {"s": "a\udc80b"}


def test_shared_references_are_fine() -> None:
    shared = [1, (2,)]
    decoded = roundtrip({"a": shared, "b": shared})
    assert decoded == {"a": [1, (2,)], "b": [1, (2,)]}


# ---------------------------------------------------------------------------------------------
# Arguments and determinism
# ---------------------------------------------------------------------------------------------


def test_arguments_roundtrip() -> None:
    args: tuple[object, ...] = (1, "two", (3,), {4}, Point(5, 6))
    kwargs: dict[str, object] = {"when": date(2020, 1, 2), "mode": Mode.READ, "n": None}
    text = encode_arguments(args, kwargs, what="arguments of workflow 'w'")
    decoded_args, decoded_kwargs = decode_arguments(text, what="arguments of workflow 'w'")
    assert type(decoded_args) is tuple
    assert_identical(args, decoded_args)
    assert_identical(kwargs, decoded_kwargs)


def test_arguments_format() -> None:
    assert encode_arguments((1, "a"), {"k": [True]}, what="a") == (
        '{"args":[1,"a"],"kwargs":{"k":[true]}}'
    )
    assert encode_arguments((), {}, what="a") == '{"args":[],"kwargs":{}}'
    assert decode_arguments('{"args":[],"kwargs":{}}', what="a") == ((), {})


def test_kwarg_named_like_the_tag_key() -> None:
    text = encode_arguments((), {TAG_KEY: 1, "x": (2,)}, what="a")
    assert decode_arguments(text, what="a") == ((), {TAG_KEY: 1, "x": (2,)})


def test_arguments_are_deterministic() -> None:
    def build() -> tuple[tuple[object, ...], dict[str, object]]:
        return (
            ({"pear", "apple", "fig"}, frozenset({3, 1, 2}), {(2, "b"), (1, "a")}),
            {"nested": {"s": {Mode.WRITE, Mode.READ}}, "p": FrozenPoint(1.0)},
        )

    texts = {encode_arguments(*build(), what="a") for _ in range(5)}
    assert len(texts) == 1
    # set items are stored sorted by their encoded form
    (text,) = texts
    stored = json.loads(text)["args"][0]["items"]
    assert stored == ["apple", "fig", "pear"]


def test_set_order_does_not_depend_on_insertion_order() -> None:
    one = set()
    two = set()
    words = [f"w{i}" for i in range(50)]
    for w in words:
        one.add(w)
    for w in reversed(words):
        two.add(w)
    assert encode_arguments((one,), {}, what="a") == encode_arguments((two,), {}, what="a")


def test_dict_insertion_order_is_kept() -> None:
    a = encode_arguments(({"x": 1, "y": 2},), {}, what="a")
    b = encode_arguments(({"y": 2, "x": 1},), {}, what="a")
    assert a != b
    assert decode_arguments(b, what="a")[0][0] == {"y": 2, "x": 1}
    assert list(decode_arguments(b, what="a")[0][0]) == ["y", "x"]  # type: ignore[call-overload]


_SUBPROCESS_SNIPPET = textwrap.dedent(
    """
    import sys
    from durable_core.codec import encode_arguments
    words = {f"item-{i}" for i in range(200)}
    mixed = {1, "1", (1, "x"), None, 2.5, b"raw"}
    sys.stdout.write(encode_arguments((words, frozenset(mixed)), {"k": {"z", "y"}}, what="a"))
    """
)


def _encode_in_subprocess(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS_SNIPPET],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def test_set_encoding_is_identical_across_hash_seeds() -> None:
    seeds = ["0", "1", "12345"]
    # Precondition: the seeds really give different iteration orders.
    orders = {
        subprocess.run(
            [sys.executable, "-c", "print(list({f'item-{i}' for i in range(200)}))"],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in seeds
    }
    assert len(orders) > 1
    texts = {_encode_in_subprocess(seed) for seed in seeds}
    assert len(texts) == 1
    (text,) = texts
    words = {f"item-{i}" for i in range(200)}
    mixed = {1, "1", (1, "x"), None, 2.5, b"raw"}
    local = encode_arguments((words, frozenset(mixed)), {"k": {"z", "y"}}, what="a")
    assert text == local


# ---------------------------------------------------------------------------------------------
# Refusals at encode time
# ---------------------------------------------------------------------------------------------


def _refusal(value: Any, what: str = "output of step 'app.fetch_user'") -> str:
    with pytest.raises(SerializationError) as info:
        encode(value, what=what)
    message = str(info.value)
    assert what in message
    return message


def test_refuses_local_dataclass() -> None:
    @dataclasses.dataclass
    class Local:
        x: int

    message = _refusal({"item": Local(1)})
    assert "value['item']" in message
    assert "Local" in message
    assert "inside a function" in message


def test_refuses_local_enum() -> None:
    class LocalEnum(enum.Enum):
        A = 1

    assert "inside a function" in _refusal([LocalEnum.A])


def test_refuses_lambda() -> None:
    message = _refusal([1, lambda: None])
    assert "value[1]" in message
    assert "function" in message


def test_refuses_plain_object() -> None:
    message = _refusal(object())
    assert "value:" in message
    assert "object" in message


def test_refuses_unknown_class_deep_inside_and_names_the_path() -> None:
    value = {"users": [User("a", 1), User("b", 2), User("c", Opaque())]}
    message = _refusal(value)
    assert "value['users'][2].created" in message
    assert f"{MODULE}.Opaque" in message


def test_refusal_path_for_non_str_key_dict_and_tuple() -> None:
    message = _refusal({1: (0, {"deep": object()})})
    assert "value[1][1]['deep']" in message


def test_refusal_for_unencodable_dict_key() -> None:
    message = _refusal({Opaque(): 1})
    assert "<key" in message
    assert "Opaque" in message


def test_refusal_inside_set() -> None:
    assert "<item" in _refusal({1, Opaque()})


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param(MyInt(3), "MyInt", id="int-subclass"),
        pytest.param(OrderedDict(a=1), "OrderedDict", id="dict-subclass"),
        pytest.param(range(3), "range", id="range"),
        pytest.param(iter([1]), "list_iterator", id="iterator"),
        pytest.param(Point, "type", id="a-class"),
        pytest.param(datetime(2020, 1, 1, tzinfo=FixedTz()), "FixedTz", id="custom-tzinfo"),
        pytest.param(WithUnsetField("x"), "'note'", id="unset-init-false-field"),
        pytest.param(Suffixing("a"), "would not read back", id="non-idempotent-post-init"),
        pytest.param({float("nan")}, "set", id="nan-in-set"),
        pytest.param(Anything(payload=Point(1, 2)), "would not read back", id="pydantic-any-model"),
        pytest.param(Anything(payload=Opaque()), "payload", id="pydantic-unsupported-field"),
    ],
)
def test_refuses_values_that_cannot_roundtrip(value: Any, fragment: str) -> None:
    assert fragment in _refusal(value)


def test_non_idempotent_post_init_names_the_field() -> None:
    message = _refusal({"k": Suffixing("a")})
    assert "value['k'].name" in message
    assert "'a!'" in message and "'a!!'" in message


def test_pydantic_any_field_mismatch_names_types() -> None:
    message = _refusal(Anything(payload=Point(1, 2)))
    assert "value.payload" in message
    assert f"{MODULE}.Point" in message and "dict" in message


def test_refuses_circular_reference() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    message = _refusal(loop)
    assert "circular" in message
    assert "value[1]" in message


def test_refuses_too_deep_nesting_without_raw_recursion_error() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(SerializationError, match="nested too deeply"):
        encode(deep, what="deep value")


def test_argument_refusal_names_argument() -> None:
    with pytest.raises(SerializationError) as info:
        encode_arguments((1, Opaque()), {}, what="arguments of workflow 'w'")
    assert "arguments of workflow 'w'" in str(info.value)
    assert "args[1]" in str(info.value)
    with pytest.raises(SerializationError) as info:
        encode_arguments((), {"when": [object()]}, what="input of step 's'")
    assert "input of step 's'" in str(info.value)
    assert "kwargs['when'][0]" in str(info.value)


def test_serialization_error_is_a_framework_error() -> None:
    with pytest.raises(FrameworkError):
        encode(object())
    assert SerializationError.retryable is False


# ---------------------------------------------------------------------------------------------
# Decoding corrupted or hostile text
# ---------------------------------------------------------------------------------------------

WHAT = "cached output of step 'app.load'"


def _decode_error(text: str) -> SerializationError:
    with pytest.raises(SerializationError) as info:
        decode(text, what=WHAT)
    assert WHAT in str(info.value)
    return info.value


def test_decode_arguments_truncated_json() -> None:
    with pytest.raises(SerializationError) as info:
        decode_arguments('{"args": [', what="arguments of workflow 'w'")
    assert "arguments of workflow 'w'" in str(info.value)
    assert "not valid JSON" in str(info.value)
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_decode_not_json() -> None:
    error = _decode_error("not json")
    assert isinstance(error.__cause__, ValueError)


@pytest.mark.parametrize("text", ["", "[1, 2", '{"a": 1} trailing', "NaN", "[Infinity]"])
def test_decode_invalid_json(text: str) -> None:
    _decode_error(text)


def test_decode_unknown_tag() -> None:
    assert "'nope'" in str(_decode_error('{"__durable__": "nope"}'))


def test_decode_non_string_tag() -> None:
    _decode_error('{"__durable__": ["tuple"], "items": []}')


def test_decode_missing_module() -> None:
    error = _decode_error(
        '{"__durable__":"dataclass","type":"no_such_module_xyz:Thing","fields":{}}'
    )
    assert "no_such_module_xyz" in str(error)
    assert "not imported" in str(error)  # refused before any import is tried


def test_decode_missing_attribute() -> None:
    error = _decode_error(f'{{"__durable__":"dataclass","type":"{MODULE}:NoSuch","fields":{{}}}}')
    assert "NoSuch" in str(error)


EXPECTED_KIND = {
    "dataclass": "not a dataclass",
    "enum": "not an Enum class",
    "namedtuple": "not a NamedTuple class",
    "pydantic": "not a pydantic BaseModel subclass",
}


@pytest.mark.parametrize(
    ("kind", "ref"),
    [
        ("dataclass", "collections:OrderedDict"),
        ("dataclass", "os:system"),
        ("dataclass", f"{MODULE}:Color"),
        ("enum", f"{MODULE}:Point"),
        ("namedtuple", "builtins:tuple"),
        ("namedtuple", f"{MODULE}:Point"),
        ("pydantic", f"{MODULE}:Point"),
        ("pydantic", "builtins:dict"),
    ],
)
def test_decode_type_of_the_wrong_kind(kind: str, ref: str) -> None:
    text = json.dumps(
        {TAG_KEY: kind, "type": ref, "fields": {}, "items": [], "value": 1, "data": {}}
    )
    error = _decode_error(text)
    assert ref in str(error)
    assert EXPECTED_KIND[kind] in str(error)


def test_kind_is_checked_even_when_the_type_was_resolved_before() -> None:
    assert decode(encode(Point(1, 2))) == Point(1, 2)  # resolves and caches the dataclass
    error = _decode_error(json.dumps({TAG_KEY: "enum", "type": f"{MODULE}:Point", "value": 1}))
    assert "not an Enum class" in str(error)


@pytest.mark.parametrize(
    "ref", ["os", "os:", ":system", "os:path.__class__", "os:a b", f"{MODULE}:Point.__init__"]
)
def test_decode_rejects_malformed_type_references(ref: str) -> None:
    _decode_error(json.dumps({TAG_KEY: "dataclass", "type": ref, "fields": {}}))


@pytest.mark.parametrize(
    "payload",
    [
        {TAG_KEY: "tuple"},
        {TAG_KEY: "tuple", "items": "abc"},
        {TAG_KEY: "dict", "items": [[1]]},
        {TAG_KEY: "dict", "items": [[[1], 2]]},
        {TAG_KEY: "set", "items": [[1]]},
        {TAG_KEY: "bytes", "b64": "!!!"},
        {TAG_KEY: "int", "hex": "xyz"},
        {TAG_KEY: "float", "value": "big"},
        {TAG_KEY: "datetime", "value": "yesterday", "tz": None},
        {TAG_KEY: "datetime", "value": "2020-01-01T00:00:00", "tz": {"zone": "Not/AZone"}},
        {TAG_KEY: "datetime", "value": "2020-01-01T00:00:00", "tz": "UTC"},
        {TAG_KEY: "timedelta", "days": "1", "seconds": 0, "microseconds": 0},
        {TAG_KEY: "uuid", "value": "nope"},
        {TAG_KEY: "decimal", "value": "one"},
        {TAG_KEY: "path", "type": "EvilPath", "value": "/"},
        {TAG_KEY: "enum", "type": f"{MODULE}:Color", "value": "purple"},
        {TAG_KEY: "dataclass", "type": f"{MODULE}:Point", "fields": {"x": 1}},
        {TAG_KEY: "dataclass", "type": f"{MODULE}:Point", "fields": {"x": 1, "y": 2, "z": 3}},
        {TAG_KEY: "dataclass", "type": f"{MODULE}:Point", "fields": [1, 2]},
        {TAG_KEY: "namedtuple", "type": f"{MODULE}:Pair", "items": [1]},
        {TAG_KEY: "pydantic", "type": f"{MODULE}:Strict", "data": {"value": "x"}},
        {TAG_KEY: "pydantic", "type": f"{MODULE}:Strict", "data": {"value": 1, "extra": 2}},
    ],
)
def test_decode_corrupted_payloads(payload: dict[str, Any]) -> None:
    error = _decode_error(json.dumps(payload))
    assert repr(payload[TAG_KEY]) in str(error)


def test_decode_rejects_non_str() -> None:
    with pytest.raises(SerializationError, match="cannot decode x"):
        decode(b"[]", what="x")  # type: ignore[arg-type]


def test_decode_too_deep() -> None:
    _decode_error("[" * 200_000 + "]" * 200_000)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"args": []}',
        '{"args": {}, "kwargs": {}}',
        '{"args": [], "kwargs": [], "x": 1}',
        '{"args": [], "kwargs": {"__durable__": "dict", "items": [[1, 2]]}}',
    ],
)
def test_decode_arguments_wrong_shape(text: str) -> None:
    with pytest.raises(SerializationError, match="arguments of workflow 'w'"):
        decode_arguments(text, what="arguments of workflow 'w'")


def test_module_imports_and_works_without_pydantic() -> None:
    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "pydantic" or name.startswith("pydantic."):
                    raise ImportError("pydantic blocked")
                return None
        sys.meta_path.insert(0, Block())
        from durable_core.errors import SerializationError
        from durable_core.codec import convert, decode, encode
        assert "pydantic" not in sys.modules
        value = {"a": (1, {2}), "b": b"x"}
        assert decode(encode(value)) == value
        assert convert([1], tuple) == (1,)
        try:
            decode('{"__durable__":"pydantic","type":"collections:OrderedDict","data":{}}')
        except SerializationError as exc:
            assert "pydantic" in str(exc), exc
        else:
            raise AssertionError("expected SerializationError")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# ---------------------------------------------------------------------------------------------
# convert
# ---------------------------------------------------------------------------------------------


def test_convert_instance_passes_through() -> None:
    p = Point(1, 2)
    assert convert(p, Point) is p
    assert convert("s", str) == "s"


def test_convert_any_and_object() -> None:
    marker = Opaque()
    any_type: Any = Any
    assert convert(marker, any_type) is marker
    assert convert(marker, object) is marker


def test_convert_dict_to_dataclass() -> None:
    result = convert({"x": 1, "y": 2}, Point)
    assert type(result) is Point
    assert result == Point(1, 2)


def test_convert_dict_to_pydantic() -> None:
    result = convert({"street": "s", "zipCode": "9"}, Address)
    assert type(result) is Address
    assert result.zip_code == "9"


def test_convert_model_to_other_model() -> None:
    result = convert(Loose(value=3), Strict)
    assert type(result) is Strict
    assert result.value == 3


def test_convert_containers() -> None:
    assert convert([1, 2], tuple) == (1, 2)
    assert type(convert([1, 2], tuple)) is tuple
    assert convert((1, 2), list) == [1, 2]
    assert convert([1, 1, 2], set) == {1, 2}
    assert convert([1], frozenset) == frozenset({1})
    ordered = OrderedDict(a=1)
    assert convert(ordered, dict) is ordered  # already a dict
    proxy = types.MappingProxyType({"a": 1})
    assert convert(proxy, dict) == {"a": 1}
    assert type(convert(proxy, dict)) is dict


def test_convert_parametrised_generics() -> None:
    points = convert([{"x": 1, "y": 2}, Point(3, 4)], list[Point])
    assert points == [Point(1, 2), Point(3, 4)]
    assert all(type(p) is Point for p in points)
    assert convert([1, "a"], tuple[int, str]) == (1, "a")
    assert convert({"k": {"x": 0, "y": 0}}, dict[str, Point]) == {"k": Point(0, 0)}
    assert convert(None, Point | None) is None  # type: ignore[arg-type]
    assert convert({"x": 5, "y": 6}, Point | None) == Point(5, 6)  # type: ignore[arg-type]


def test_convert_enum_namedtuple_and_float() -> None:
    assert convert("red", Color) is Color.RED
    assert convert([1, "a"], Pair) == Pair(1, "a")
    assert type(convert([1, "a"], Pair)) is Pair
    result = convert(2, float)
    assert type(result) is float and result == 2.0


@pytest.mark.parametrize(
    ("value", "target", "fragment"),
    [
        ("12", int, "cannot convert str to int"),
        (True, str, "cannot convert bool to str"),
        ({"x": 1}, Point, "Point"),  # missing field
        ({"street": "s"}, Address, "Address"),  # pydantic validation error
        ("purple", Color, "Color"),
        ([1, 2, 3], tuple[int, str], "length 2, got 3"),
        ("abc", list, "cannot convert str to list"),
        (1.5, int, "cannot convert float to int"),
        (Opaque(), Point | None, "Point"),
    ],
)
def test_convert_failures(value: Any, target: Any, fragment: str) -> None:
    with pytest.raises(SerializationError) as info:
        convert(value, target)
    assert fragment in str(info.value)


def test_convert_failure_chains_the_cause() -> None:
    with pytest.raises(SerializationError) as info:
        convert({"x": 1}, Point)
    assert isinstance(info.value.__cause__, msgspec.ValidationError)  # convert is msgspec's
    assert "missing required field `y`" in str(info.value)
    with pytest.raises(SerializationError) as info:
        convert({"street": 1}, Address)
    assert isinstance(info.value.__cause__, pydantic.ValidationError)
