"""The encrypting codec (issue 37): AES-GCM with keys by id, in every table of every backend,
through a caller, a body, the CLI and the dashboard. The crash test across a key rotation,
with real worker processes, is ``tests/worker/test_encryption_processes.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from durable_core import (
    ConfigurationError,
    DurableClient,
    EncryptionKeyError,
    WorkflowConflictError,
    WorkflowStatus,
)
from durable_core.codec import EncryptingCodec, decode, encode, encode_arguments
from durable_core.codec.encryption import from_env, new_key, parse_keys
from durable_core.codec.failures import load_error
from durable_core.codec.formats import current_codec, use_codec
from tests.conftest import Backend
from tests.encryption_support import encrypting, found_in, keys_env
from tests.private_flows import Person, enrol, person, run_enrolment, secrets_of
from tests.raw_sql import every_row

ROOT = Path(__file__).resolve().parents[1]
KEY_A, KEY_B = os.urandom(32), os.urandom(32)


@dataclass(frozen=True)
class Parcel:
    to: str
    weight: Decimal
    items: tuple[str, ...]


@pytest.fixture(autouse=True)
def _plain_json_after() -> Iterator[None]:
    yield
    use_codec("json")


VALUES: list[Any] = [
    None,
    "Grace Hopper",
    42,
    2**300,
    3.25,
    [1, (2, 3), {"a": {4, 5}}],
    {"when": datetime(2026, 5, 4, 12, 30, tzinfo=UTC), "day": date(1906, 12, 9)},
    b"\x00\xffbytes",
    Parcel("Grace Hopper", Decimal("1.250"), ("cobol", "nanosecond")),
]


@pytest.mark.parametrize("value", VALUES, ids=[type(v).__name__ for v in VALUES])
def test_every_value_reads_back_faithfully_and_differs_each_time(value: Any) -> None:
    """Encrypted values read back equal and of the same type (the JSON codec's faithfulness
    kept); the same value encrypts differently each time (a nonce of its own)."""
    with encrypting({"A": KEY_A}):
        first, second = encode(value, what="v"), encode(value, what="v")
        assert first.startswith("@aes-gcm:A:") and first != second
        for text in (first, second):
            read = decode(text)
            assert read == value and type(read) is type(value)
            assert "Grace" not in text and "Hopper" not in text


def test_keys_rotate_and_a_missing_or_wrong_key_says_so() -> None:
    """A value is read with the key its text names: after a rotation (B current, A kept)
    both read; without A, reading A's values names the key; an altered text, or one moved
    under another id, does not decrypt."""
    with encrypting({"A": KEY_A}):
        old = encode({"name": "Grace Hopper"})
    with encrypting({"A": KEY_A, "B": KEY_B}, current="B") as codec:
        new = encode({"name": "Grace Hopper"})
        assert new.startswith("@aes-gcm:B:") and codec.current == "B"
        assert decode(old) == decode(new) == {"name": "Grace Hopper"}
        payload = old.split(":", 2)[2]
        flipped = payload[:-3] + ("A" if payload[-3] != "A" else "B") + payload[-2:]
        for altered in (f"@aes-gcm:A:{flipped}", f"@aes-gcm:B:{payload}"):
            with pytest.raises(EncryptionKeyError, match="not the one it was encrypted with"):
                decode(altered)
    with encrypting({"B": KEY_B}):
        with pytest.raises(EncryptionKeyError, match="encrypted with key 'A', which this"):
            decode(old)
        assert decode(new) == {"name": "Grace Hopper"}


def test_keys_come_from_the_environment_or_a_callable() -> None:
    """``DURABLE_ENCRYPTION_KEYS`` holds ``id=base64`` pairs (the last is current unless
    ``DURABLE_ENCRYPTION_KEY_ID`` names one); a bad entry is named, never printed; a
    callable is read at first use and again after ``reload()``."""
    env = keys_env({"A": KEY_A, "B": KEY_B})
    codec = from_env(env)
    assert codec is not None and codec.current == "B" and codec.key_ids == ["A", "B"]
    assert from_env({**env, "DURABLE_ENCRYPTION_KEY_ID": "A"}).current == "A"  # type: ignore[union-attr]
    assert from_env({}) is None
    assert len(parse_keys(f"K={new_key()}")["K"]) == 32
    secret = env["DURABLE_ENCRYPTION_KEYS"]
    for bad, said in (
        ("A=not base64!", "key 'A' is not base64"),
        ("no-equals-sign", "entry 1 is not"),
        (f"A={new_key()[:10]}", "is 7 bytes: AES-GCM takes 16, 24 or 32"),
    ):
        with pytest.raises(ConfigurationError, match=said) as caught:
            EncryptingCodec(parse_keys(bad))
        assert secret not in str(caught.value)
    with pytest.raises(ConfigurationError, match="'C' is not among the keys"):
        from_env({**env, "DURABLE_ENCRYPTION_KEY_ID": "C"})

    served: list[dict[str, bytes]] = [{"A": KEY_A}]
    rotating = EncryptingCodec(lambda: served[-1])
    text = rotating.seal('"x"')
    served.append({"A": KEY_A, "B": KEY_B})
    assert rotating.current == "A"  # read once, until reloaded
    rotating.reload()
    assert rotating.current == "B" and rotating.reveal(text) == '"x"'


async def test_a_workflow_leaves_no_plaintext_in_any_table(any_backend: Backend) -> None:
    """Everything a workflow stores (input, steps, a failed try, an event, a stream, a
    message, an update and its reply, a child, its error) is encrypted in every table but
    for what must stay searchable (attributes, error types); a caller with the key reads
    it all back, one without is told which key it lacks."""
    store = any_backend.store
    grace, ada = person("Grace Hopper"), person("Ada Lovelace")
    with encrypting({"A": KEY_A}):
        done, status = await run_enrolment(store, grace, "approved")
        assert status is WorkflowStatus.SUCCEEDED
        refused, status = await run_enrolment(store, ada, "refuse")
        assert status is WorkflowStatus.FAILED
        client = DurableClient(store)
        assert await client.handle(done).output() == {
            "letter": "Dear Grace Hopper",
            "note": "approved",
            "child": "Dear Grace Hopper",
        }
        assert await client.handle(done).get_event("letter") == "Dear Grace Hopper"
        error = await client.handle(refused).error()
        assert error is not None and error["type"] == "builtins.PermissionError"
        assert error["message"] == "Ada Lovelace <ada.lovelace@example.org> was refused"
        listed = await client.list_workflows(error_type="builtins.PermissionError", limit=500)
        assert refused in [r.id for r in listed]
        searched = await client.list_workflows(attributes={"customer": grace.email})
        assert [r.id for r in searched] == [done]

    rows = await every_row(any_backend.url)
    leaks = found_in(rows, [s for who in (grace, ada) for s in secrets_of(who)])
    attribute_rows = [f"workflow_attributes: {s}" for s in (grace.email, ada.email)]
    assert sorted(leaks) == sorted(attribute_rows), leaks  # searchable, by design
    assert "Dear" not in repr(rows) and "approved" not in repr(rows)
    ours = [r for r in rows["workflows"] if r[0] in (done, refused)]
    assert all(str(r[3]).startswith("@aes-gcm:A:") for r in ours)

    with encrypting({"B": KEY_B}):
        with pytest.raises(EncryptionKeyError, match="key 'A'"):
            await DurableClient(store).handle(done).output()
        sealed = load_error((await DurableClient(store).get(refused)).error)
        assert sealed is not None and sealed["message"] == "encrypted (aes-gcm, key A)"
        assert sealed["type"] == "builtins.PermissionError"


async def test_a_start_repeated_under_encryption_is_still_the_same_start(
    any_backend: Backend,
) -> None:
    """``start_workflow_with_id`` twice with the same arguments writes one workflow (the
    two encrypted texts differ, their values do not); other arguments still conflict."""
    client = DurableClient(any_backend.store)
    grace = person("Grace Hopper")
    order_id = f"enrol-{os.urandom(4).hex()}"
    with encrypting({"A": KEY_A}):
        first = await client.start_workflow_with_id(order_id, enrol, grace)
        again = await client.start_workflow_with_id(order_id, enrol, grace)
        assert first.id == again.id == order_id
        with pytest.raises(WorkflowConflictError):
            await client.start_workflow_with_id(order_id, enrol, person("Ada Lovelace"))
    assert len(await client.list_workflows(name=enrol.name, limit=1000)) >= 1


def _durable(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_core", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DURABLE_")}, **env},
    )


async def test_the_cli_shows_encrypted_values_as_such_or_decrypted_with_the_key(
    tmp_path: Path,
) -> None:
    """``durable show`` without the keys says which key each value is encrypted with; with
    ``DURABLE_ENCRYPTION_KEYS`` it shows them decoded, the error's message too; ``durable
    start`` with the keys writes encrypted input."""
    from durable_sqlite import SQLiteStore

    url = f"sqlite:///{tmp_path / 'private.db'}"
    async with SQLiteStore(url) as store:
        await store.apply_schema()
        with encrypting({"A": KEY_A}):
            refused, _ = await run_enrolment(store, person("Ada Lovelace"), "refuse")
    plain = _durable("show", refused, "--database-url", url, env={})
    assert plain.returncode == 0, plain.stderr
    assert "input     encrypted (aes-gcm, key A)" in plain.stdout
    assert "error     builtins.PermissionError: encrypted (aes-gcm, key A)" in plain.stdout
    assert "Lovelace" not in plain.stdout
    keyed = _durable("show", refused, "--database-url", url, env=keys_env({"A": KEY_A}))
    assert keyed.returncode == 0, keyed.stderr
    assert 'Person(name="Ada Lovelace"' in keyed.stdout.replace("'", '"')
    assert "Ada Lovelace <ada.lovelace@example.org> was refused" in keyed.stdout

    started = _durable(
        "start", enrol.name, "--app", "tests.private_flows", "--database-url", url,
        "--args", '[{"__durable__": "dataclass", "type": "tests.private_flows:Person",'
        ' "fields": {"name": "Alan Turing", "email": "alan@example.org",'
        ' "born": {"__durable__": "date", "value": "1912-06-23"}}}]',
        env=keys_env({"A": KEY_A}),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    async with SQLiteStore(url) as store:
        record = await DurableClient(store).get(started.stdout.strip())
    assert record.input.startswith("@aes-gcm:A:") and "Turing" not in record.input


def test_arguments_are_encrypted_whole() -> None:
    """A call's arguments are one encrypted value (no argument's type or count shows)."""
    with encrypting({"A": KEY_A}):
        text = encode_arguments((Person("Grace Hopper", "g@h", date(1906, 12, 9)),), {}, what="x")
    assert text.startswith("@aes-gcm:A:") and "Person" not in text
    assert current_codec().name == "json"


async def test_the_dashboard_shows_encrypted_values_as_such_or_decrypted_with_the_key(
    tmp_path: Path,
) -> None:
    """``durable dashboard`` without the keys shows each encrypted value as ``encrypted
    (aes-gcm, key A)``; started with them, it shows them decoded, and a message sent from
    its page is stored encrypted."""
    from urllib.parse import quote, urlencode

    from durable_sqlite import SQLiteStore
    from tests.test_dashboard import _http, _start_server, _stop

    url = f"sqlite:///{tmp_path / 'private.db'}"
    async with SQLiteStore(url) as store:
        await store.apply_schema()
        with encrypting({"A": KEY_A}):
            refused, _ = await run_enrolment(store, person("Ada Lovelace"), "refuse")
            waiting = await DurableClient(store).start_workflow(enrol, person("Alan Turing"))
    page = f"/workflows/{quote(refused, safe='')}"
    blind = _start_server(url, env={})
    try:
        status, _, body = _http(blind.base, page)
    finally:
        _stop(blind)
    assert status == 200 and "Lovelace" not in body
    assert body.count("encrypted (aes-gcm, key A)") >= 4  # input, output of steps, error
    keyed = _start_server(url, env=keys_env({"A": KEY_A}))
    try:
        status, _, body = _http(keyed.base, page)
        assert status == 200 and "Ada Lovelace" in body and "encrypted (" not in body
        assert "Ada Lovelace &lt;ada.lovelace@example.org&gt; was refused" in body
        form = urlencode({"action": "send", "topic": "approval", "message": '"from the page"'})
        target = f"/workflows/{quote(waiting.id, safe='')}"
        assert _http(keyed.base, target, method="POST", body=form)[0] == 303
    finally:
        _stop(keyed)
    [(payload,)] = await _fetch_payloads(url, waiting.id)
    assert payload.startswith("@aes-gcm:A:") and "from the page" not in payload


async def _fetch_payloads(url: str, workflow_id: str) -> list[tuple[Any, ...]]:
    from tests.raw_sql import fetch

    return await fetch(
        url, "SELECT payload FROM workflow_messages WHERE workflow_id = :id", {"id": workflow_id}
    )
