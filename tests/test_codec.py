"""The codec's extension points: stable type names and aliases, codecs for a user's own
classes, named formats recorded with each value, and decoding that imports nothing on its own.
"""

from __future__ import annotations

import base64
import dataclasses
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import asyncpg
import msgspec
import pytest
import sqlalchemy as sa

from durable_core import (
    Codec,
    DurableClient,
    FrameworkError,
    RegistrationError,
    SerializationError,
    UnknownCodecError,
    WorkflowConfig,
    WorkflowStatus,
    allow_modules,
    durable_type,
    register_codec,
    register_type,
    use_codec,
    workflow,
    workflow_step,
)
from durable_core.codec import decode, decode_arguments, encode, encode_arguments
from durable_core.seams.store import Store
from durable_core.testing import WorkflowRunner
from durable_postgres import PostgresStore
from durable_sqlite import SQLiteStore
from tests.codec_types import Order, Tier
from tests.conftest import POSTGRES_URL, drop_postgres_database, fresh_postgres_database

# Written by durable-core before the codec package (durable_core/serialization.py at 0.1):
# a value and call arguments as rows of existing databases hold them.
TODAY_VALUE = (
    '{"__durable__":"dict","items":[["order",{"__durable__":"dataclass","type":'
    '"tests.codec_types:Order","fields":{"number":"A-1","total":{"__durable__":"decimal",'
    '"value":"12.50"},"tier":{"__durable__":"enum","type":"tests.codec_types:Tier","value":'
    '"gold"},"tags":{"__durable__":"frozenset","items":["gift","rush"]}}}],["at",'
    '{"__durable__":"datetime","value":"2026-03-01T09:30:00+01:00","tz":{"offset":3600}}],'
    '["id",{"__durable__":"uuid","value":"12345678-1234-5678-1234-567812345678"}],["pair",'
    '{"__durable__":"tuple","items":[1,{"__durable__":"bytes","b64":"AP8="}]}],[7,null]]}'
)
TODAY_ARGUMENTS = (
    '{"args":[{"__durable__":"dataclass","type":"tests.codec_types:Order","fields":{"number":'
    '"B-2","total":{"__durable__":"decimal","value":"1E+3"},"tier":{"__durable__":"enum",'
    '"type":"tests.codec_types:Tier","value":"silver"},"tags":{"__durable__":"frozenset",'
    '"items":[]}}}],"kwargs":{"note":"é"}}'
)
VALUE = {
    "order": Order("A-1", Decimal("12.50"), Tier.GOLD, frozenset({"rush", "gift"})),
    "at": datetime(2026, 3, 1, 9, 30, tzinfo=timezone(timedelta(hours=1))),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "pair": (1, b"\x00\xff"),
    7: None,
}
ORDER_B = Order("B-2", Decimal("1E+3"), Tier.SILVER, frozenset())
FAST = WorkflowConfig(retry_backoff_secs=0)


class Msgpack(Codec):
    """Another format: MessagePack (msgspec's), base64 so that it fits a text column."""

    name = "test-msgpack"

    def encode(self, value: object, *, what: str) -> str:
        return base64.b64encode(msgspec.msgpack.encode(value)).decode("ascii")

    def decode(self, text: str, *, what: str) -> object:
        return msgspec.msgpack.decode(base64.b64decode(text))


MSGPACK = Msgpack()
register_codec(MSGPACK)


@pytest.fixture
def restore_default_codec() -> object:
    yield None
    use_codec("json")


# -- today's format ---------------------------------------------------------------------------


def test_the_json_codec_writes_and_reads_todays_format_unchanged() -> None:
    assert decode(TODAY_VALUE) == VALUE
    assert encode(VALUE) == TODAY_VALUE  # byte for byte: no marker, no new field
    assert decode_arguments(TODAY_ARGUMENTS, what="arguments") == ((ORDER_B,), {"note": "é"})
    assert encode_arguments((ORDER_B,), {"note": "é"}, what="arguments") == TODAY_ARGUMENTS


@workflow(name="codec.keep_order")
async def keep_order(order: Order, note: str) -> dict[str, object]:
    kept = await keep(order)
    return {"order": kept, "note": note}


@workflow_step(name="codec.keep")
async def keep(order: Order) -> Order:
    return order


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_and_sql(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Store, Callable[[str, str], Awaitable[None]]]]:
    """A store with the schema applied, and a way to set a workflow row's ``input`` by SQL."""
    if request.param == "sqlite":
        sqlite = SQLiteStore(f"sqlite:///{tmp_path / 'durable.db'}")
        await sqlite.open()
        await sqlite.apply_schema()

        async def set_input_sqlite(workflow_id: str, text: str) -> None:
            async with sqlite.engine.begin() as conn:
                await conn.execute(
                    sa.text("UPDATE workflows SET input = :t WHERE id = :i"),
                    {"t": text, "i": workflow_id},
                )

        try:
            yield sqlite, set_input_sqlite
        finally:
            await sqlite.close()
        return
    base = POSTGRES_URL.rsplit("/", 1)[-1].split("?")[0]
    url = await fresh_postgres_database(POSTGRES_URL, f"{base}_codec")
    postgres = PostgresStore(url)
    await postgres.open()
    await postgres.apply_schema()

    async def set_input_postgres(workflow_id: str, text: str) -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("UPDATE workflows SET input = $1 WHERE id = $2", text, workflow_id)
        finally:
            await conn.close()

    try:
        yield postgres, set_input_postgres
    finally:
        await postgres.close()
        await drop_postgres_database(url)


async def test_a_row_written_in_todays_format_runs_and_reads_back(
    store_and_sql: tuple[Store, Callable[[str, str], Awaitable[None]]],
) -> None:
    store, set_input = store_and_sql
    handle = await DurableClient(store).start_workflow(
        keep_order, Order("x", Decimal(0), Tier.GOLD, frozenset()), ""
    )
    await set_input(handle.id, TODAY_ARGUMENTS)  # the row as an existing database holds it
    assert await WorkflowRunner(store, FAST).run_once(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == {"order": ORDER_B, "note": "é"}
    assert [s.output for s in await handle.steps()] == [
        TODAY_ARGUMENTS[len('{"args":[') : -len('],"kwargs":{"note":"é"}}')]
    ], "the step's output is stored in today's format too"


# -- named codecs -----------------------------------------------------------------------------


FAILS = {"left": 0}


@workflow_step(name="codec.double")
async def double(x: int) -> int:
    return x * 2


@workflow_step(name="codec.flaky_add")
async def flaky_add(x: int, y: int) -> int:
    if FAILS["left"]:
        FAILS["left"] -= 1
        raise RuntimeError("fails once")
    return x + y


@workflow(name="codec.sum_doubled", max_attempts=2)
async def sum_doubled(a: int, b: int) -> int:
    return await flaky_add(await double(a), b)


async def test_values_are_read_by_the_codec_that_wrote_them_after_the_default_changes(
    sqlite_store: SQLiteStore, restore_default_codec: object
) -> None:
    use_codec(MSGPACK.name)
    FAILS["left"] = 1
    handle = await DurableClient(sqlite_store).start_workflow(sum_doubled, 20, 2)
    runner = WorkflowRunner(sqlite_store, FAST)
    assert await runner.run_once(handle) is WorkflowStatus.PENDING  # flaky_add failed once
    use_codec("json")  # the deploy changes the default while the workflow waits to retry
    assert await runner.run_once(handle) is WorkflowStatus.SUCCEEDED
    assert await handle.output() == 42
    record = await handle.info()
    assert record.input.startswith("@test-msgpack:"), record.input
    assert record.output == "42"
    outputs = {s.step_name: s.output for s in await handle.steps()}
    assert outputs["codec.double"] is not None
    assert outputs["codec.double"].startswith("@test-msgpack:"), "cached and read by msgpack"
    assert outputs["codec.flaky_add"] == "42", "written after the switch, by the JSON codec"


def test_a_codec_value_round_trips_and_names_its_codec(restore_default_codec: object) -> None:
    use_codec(MSGPACK.name)
    text = encode({"n": [1, 2]})
    call = encode_arguments((1, "a"), {"k": None}, what="arguments")
    use_codec("json")
    assert text.startswith("@test-msgpack:")
    assert decode(text) == {"n": [1, 2]}
    assert decode_arguments(call, what="arguments") == ((1, "a"), {"k": None})
    assert encode({"n": [1, 2]}) == '{"n":[1,2]}'


def test_a_value_naming_an_unregistered_codec_is_a_clear_error() -> None:
    with pytest.raises(UnknownCodecError) as info:
        decode("@protobuf:CgRhYmNk", what="output of step 's'")
    message = str(info.value)
    assert "output of step 's'" in message and "'protobuf'" in message
    assert "not registered" in message
    assert isinstance(info.value, SerializationError) and isinstance(info.value, FrameworkError)
    with pytest.raises(UnknownCodecError, match="'protobuf'"):
        use_codec("protobuf")
    with pytest.raises(SerializationError, match="names no codec"):
        decode("@ no name", what="x")


def test_register_codec_refuses_a_taken_or_invalid_name() -> None:
    register_codec(MSGPACK)  # the same codec again is fine
    with pytest.raises(RegistrationError, match="already registered"):
        register_codec(Msgpack())
    with pytest.raises(RegistrationError, match="already registered"):
        register_codec(type("J", (Msgpack,), {"name": "json"})())
    with pytest.raises(RegistrationError, match="codec name"):
        register_codec(type("Bad", (Msgpack,), {"name": "a:b"})())


def test_a_failing_codec_is_a_serialization_error(restore_default_codec: object) -> None:
    use_codec(MSGPACK.name)
    with pytest.raises(SerializationError, match="with codec 'test-msgpack'") as info:
        encode(object(), what="output of step 's'")
    assert "output of step 's'" in str(info.value)


# -- stable names, aliases, codecs for a user's own classes ------------------------------------


@durable_type("codec-test.Parcel", aliases=["tests.old_shipping:Box"])
@dataclasses.dataclass
class Parcel:
    weight: Fraction
    label: str


register_type(
    Fraction,
    "codec-test.fraction",
    encode=lambda f: [f.numerator, f.denominator],
    decode=lambda d: Fraction(*d),
)


def test_a_declared_type_is_stored_under_its_stable_name() -> None:
    value = Parcel(Fraction(3, 4), "p")
    text = encode(value)
    assert '"type":"codec-test.Parcel"' in text
    assert '"__durable__":"custom","type":"codec-test.fraction","data":[3,4]' in text
    assert decode(text) == value


def test_an_alias_reads_values_stored_under_the_old_name() -> None:
    old = (
        '{"__durable__":"dataclass","type":"tests.old_shipping:Box","fields":{"weight":'
        '{"__durable__":"custom","type":"codec-test.fraction","data":[1,3]},"label":"b"}}'
    )
    assert "tests.old_shipping" not in sys.modules
    found = decode(old)
    assert type(found) is Parcel and found == Parcel(Fraction(1, 3), "b")


def test_a_custom_codec_is_verified_on_write() -> None:
    register_type(Drift, "codec-test.drift", encode=lambda d: d.n, decode=lambda n: Drift(n + 1))
    with pytest.raises(SerializationError, match="would not read back") as info:
        encode([Drift(1)], what="output")
    assert "value[0]<codec-test.drift data>" in str(info.value)


class Drift:
    """A class whose registered decode does not give back what was stored."""

    def __init__(self, n: int) -> None:
        self.n = n


def test_registration_errors_are_clear() -> None:
    with pytest.raises(RegistrationError, match="already taken by"):
        register_type(Tier, "codec-test.Parcel")
    with pytest.raises(RegistrationError, match="encode= and decode="):
        register_type(Drift2)
    with pytest.raises(RegistrationError, match="stored by durable-core"):
        register_type(datetime, "dt", encode=str, decode=str)
    with pytest.raises(RegistrationError, match="give encode and decode"):
        register_type(Drift2, encode=str)


class Drift2:
    pass


def test_a_custom_value_without_its_codec_is_a_clear_error() -> None:
    with pytest.raises(SerializationError, match="no codec registered"):
        decode('{"__durable__":"custom","type":"codec-test.nowhere","data":1}')


# -- decoding imports nothing by itself -------------------------------------------------------


def _write_module(tmp_path: Path, name: str) -> Path:
    marker = tmp_path / f"{name}.imported"
    (tmp_path / f"{name}.py").write_text(
        "import dataclasses, pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "@dataclasses.dataclass\n"
        "class Thing:\n"
        "    x: int\n"
    )
    return marker


def test_decoding_never_imports_a_module_the_stored_text_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = _write_module(tmp_path, "codec_side_effect_mod")
    text = '{"__durable__":"dataclass","type":"codec_side_effect_mod:Thing","fields":{"x":1}}'
    with pytest.raises(SerializationError) as info:
        decode(text, what="output of step 's'")
    assert "not imported" in str(info.value) and "allow_modules" in str(info.value)
    assert not marker.exists() and "codec_side_effect_mod" not in sys.modules


def test_an_allowed_module_is_imported_when_stored_text_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = _write_module(tmp_path, "codec_allowed_pkg_mod")
    allow_modules("codec_allowed_pkg_mod")
    try:
        found = decode(
            '{"__durable__":"dataclass","type":"codec_allowed_pkg_mod:Thing","fields":{"x":1}}'
        )
        assert marker.exists()
        assert type(found).__name__ == "Thing" and found.x == 1  # type: ignore[attr-defined]
    finally:
        sys.modules.pop("codec_allowed_pkg_mod", None)
    with pytest.raises(RegistrationError, match="invalid module name"):
        allow_modules("not a module")


async def test_a_row_naming_an_unregistered_codec_fails_naming_the_codec(
    store_and_sql: tuple[Store, Callable[[str, str], Awaitable[None]]],
) -> None:
    store, set_input = store_and_sql
    handle = await DurableClient(store).start_workflow(sum_doubled, 1, 2)
    await set_input(handle.id, "@protobuf:CgRhYmNk")  # written by a worker that had the codec
    assert await WorkflowRunner(store, FAST).run_once(handle) is WorkflowStatus.FAILED
    record = await handle.info()
    assert record.error is not None
    assert "UnknownCodecError" in record.error and "'protobuf'" in record.error
    assert record.attempts == 1, "not retried: like an unknown workflow, the code lacks it"


@pytest.mark.parametrize(
    "args",
    [
        (),
        (7,),
        (0, -1, 2**62, "order-7", "", True, False, None),
        ('quote " and backslash \\ and newline \n',),
        (1 << 1999,),
    ],
)
def test_plain_scalar_arguments_skip_the_encoder_and_write_the_same_text(
    args: tuple[object, ...],
) -> None:
    from durable_core.codec.text import call_text, json_text

    fast = call_text(list(args), {})
    assert fast == json_text({"args": list(args), "kwargs": {}})
    assert encode_arguments(args, {}, what="x") == fast
    assert decode_arguments(fast, what="x") == (args, {})


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1,), {"k": 2}),  # keyword arguments
        ((1.5,), {}),  # a float: not a plain scalar here
        (([1],), {}),  # a container
        (("é",), {}),  # text beyond ASCII goes the checked way
        (("\ud800",), {}),  # a lone surrogate: escaped by the checked way
        ((1 << 2000,), {}),  # an int too large for a plain literal: tagged
    ],
)
def test_other_arguments_go_the_checked_way(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    from durable_core.codec.text import call_text

    assert call_text(list(args), kwargs) is None
    text = encode_arguments(args, kwargs, what="x")
    assert decode_arguments(text, what="x") == (args, kwargs)
