"""No credential leaves the process: not in a store's description, an error message, the
``durable`` command's output, nor a log record, whichever form the URL gives it in.

The dashboard's pages are checked for the same URL forms in ``tests/test_dashboard.py``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from durable_core import store_from_url
from durable_core.errors import FrameworkError, InvalidDatabaseURLError, StoreError
from durable_core.redaction import get_logger, redact
from durable_postgres import PostgresStore
from tests.conftest import MYSQL_URL, POSTGRES_URL

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
SECRET = "hunter2"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("postgresql://app:hunter2@db:5432/orders", "postgresql://app:***@db:5432/orders"),
        ("postgres://app:hun%40ter2@db/orders", "postgres://app:***@db/orders"),
        ("postgresql://app:hun@ter/2@db/orders", "postgresql://app:***@db/orders"),
        ("postgresql://:hunter2@db/orders", "postgresql://:***@db/orders"),
        ("mysql+aiomysql://root:hunter2@db/orders", "mysql+aiomysql://root:***@db/orders"),
        ("postgresql://db/orders?user=app&password=hunter2", "?user=app&password=***"),
        ("postgresql://db/o?password=hun&ter2&sslmode=require", "?password=***&sslmode=require"),
        ("postgresql://db/o?sslpassword=hunter2", "?sslpassword=***"),
        ("postgresql://db/o?passfile=/home/app/hunter2.pgpass", "?passfile=***"),
        ("mysql://root@db/o?passwd=hunter2", "?passwd=***"),
        ("host=db user=app password=hunter2 dbname=orders", "password=*** dbname=orders"),
        ("host=db password='hun ter\\'2' dbname=orders", "password='***' dbname=orders"),
        ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql"),
        ("Params(user='app', password='hunter2', database='o')", "password='***', database"),
        ('{"user": "app", "password": "hunter2"}', '"password": "***"}'),
    ],
)
def test_each_credential_form_is_redacted(text: str, kept: str) -> None:
    shown = redact(text)
    assert SECRET not in shown and "hun%40ter2" not in shown and "ter/2" not in shown
    assert kept in shown


def test_text_without_credentials_is_left_alone() -> None:
    for text in (
        "postgresql://postgres@127.0.0.1:5432/durable",
        "workflow 0190 failed: KeyError: 'password' (step 2)",
        "give it a --token (or $DURABLE_DASHBOARD_TOKEN)",
        "user@example.com wrote: see https://example.com/a?b=c",
    ):
        assert redact(text) == text


def test_framework_errors_never_carry_a_credential() -> None:
    assert SECRET not in str(StoreError(f"open on postgresql://u:{SECRET}@db/x failed"))
    with pytest.raises(InvalidDatabaseURLError) as bad:
        store_from_url(f"nosuch://db/x?password={SECRET}")
    assert SECRET not in str(bad.value) and "nosuch://db/x?password=***" in str(bad.value)
    with pytest.raises(InvalidDatabaseURLError) as bad:
        store_from_url(f"host=127.0.0.1 user=postgres password={SECRET}")
    assert SECRET not in str(bad.value) and "password=***" in str(bad.value)


PG_FORMS = [
    POSTGRES_URL.replace("://postgres@", f"://postgres:{SECRET}@"),
    POSTGRES_URL.replace("://postgres@", "://postgres:hun%40ter2@"),
    POSTGRES_URL + f"?password={SECRET}",
    POSTGRES_URL + f"?sslpassword={SECRET}&password={SECRET}",
]


@pytest.mark.parametrize("url", PG_FORMS, ids=["userinfo", "encoded", "query", "sslpassword"])
async def test_a_postgres_store_describes_and_fails_without_the_password(
    url: str, postgres_url: str
) -> None:
    store = PostgresStore(url)
    assert SECRET not in store.description and "hun%40ter2" not in store.description
    assert "127.0.0.1" in store.description
    unreachable = PostgresStore(url.replace(":5432/", ":1/"))
    with pytest.raises(FrameworkError) as failed:
        await unreachable.open()
    assert SECRET not in str(failed.value) and "127.0.0.1:1" in str(failed.value)


def _durable(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "durable_core", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_migrate_and_its_errors_print_no_password(postgres_url: str, mysql_url: str) -> None:
    """``durable migrate`` on each URL form, and the one line of each refusal."""
    mysql_form = MYSQL_URL.replace("://root@", f"://root:{SECRET}@")
    runs = {
        url: _durable("--log-level", "DEBUG", "migrate", "--database-url", url)
        for url in (PG_FORMS[1], PG_FORMS[3])
    }
    failing = {
        url: _durable("migrate", "--database-url", url)
        for url in (mysql_form,)  # the server's root has no password: it refuses this one
    }
    for url, process in runs.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert "durable schema at version" in out and "127.0.0.1" in out, url
        assert SECRET not in out + err and "hun%40ter2" not in out + err
    for url, process in failing.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 2, (url, out, err)
        assert err.startswith("durable: error: ") and err.count("\n") == 1, err
        assert SECRET not in out + err, err


def test_log_records_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    """A durable logger's records, their tracebacks too, and every record the ``durable``
    command's handler writes (a driver's own logger included)."""
    url = f"postgresql://app:{SECRET}@db/orders?sslpassword={SECRET}"
    try:
        raise ConnectionError(f"cannot reach {url}")
    except ConnectionError as exc:
        with caplog.at_level(logging.INFO):
            get_logger("durable_core.worker").warning("claim on %s failed", url, exc_info=exc)
    assert "claim on postgresql://app:***@db/orders" in caplog.text
    assert "ConnectionError: cannot reach postgresql://app:***@db" in caplog.text
    assert SECRET not in caplog.text

    script = (
        "import logging; from durable_core.cli.common import configure_logging; "
        "configure_logging('INFO'); "
        f"logging.getLogger('asyncpg').warning('connecting to %s', {url!r})"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "connecting to postgresql://app:***@db/orders" in shown.stderr
    assert SECRET not in shown.stderr
