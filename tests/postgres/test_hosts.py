"""A PostgreSQL URL naming several hosts (a primary and its standbys): read, described
without its password, checked port by port, and connecting only to a writable server
unless it says otherwise."""

from __future__ import annotations

import pytest

from durable_core.errors import InvalidDatabaseURLError
from durable_postgres import PostgresStore
from durable_postgres.store import normalize_url

HOSTS = "db1.internal:5432,db2.internal:5433"


def test_a_url_naming_several_hosts_is_described_with_all_of_them_and_no_password() -> None:
    dsn, shown = normalize_url(
        f"postgresql://app:s3cr%40t@{HOSTS}/orders?target_session_attrs=read-write"
    )
    assert dsn == f"postgresql://app:s3cr%40t@{HOSTS}/orders?target_session_attrs=read-write"
    assert shown == (f"PostgreSQL postgresql://app@{HOSTS}/orders?target_session_attrs=read-write")
    assert "s3cr" not in PostgresStore(f"postgresql://app:s3cr%40t@{HOSTS}/orders").description


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://app@db1:5432,db2:99999/orders", "port '99999' of host 'db2'"),
        ("postgresql://app@db1:5432,db2:x/orders", "port 'x' of host 'db2'"),
        ("postgresql://app@db1:5432,,db2/orders", "an empty host"),
    ],
)
def test_a_bad_host_in_the_list_is_named(url: str, problem: str) -> None:
    with pytest.raises(InvalidDatabaseURLError, match=problem):
        PostgresStore(url)


def test_several_hosts_connect_to_the_writable_one_unless_the_url_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    several = PostgresStore(f"postgresql://app@{HOSTS}/orders")
    assert several.connector.connect_options["target_session_attrs"] == "read-write"
    chosen = PostgresStore(f"postgresql://app@{HOSTS}/orders?target_session_attrs=any")
    assert "target_session_attrs" not in chosen.connector.connect_options
    one = PostgresStore("postgresql://app@db1.internal:5432/orders")
    assert "target_session_attrs" not in one.connector.connect_options
    in_query = PostgresStore("postgresql://app@/orders?host=db1,db2&port=5432,5433")
    assert in_query.connector.connect_options["target_session_attrs"] == "read-write"
