"""One WARNING per database outage, whichever parts of a process retry through it, and one
classification of what an outage is (refused or cut connections, too many clients, a
standby's read-only refusal, a statement the server cancelled)."""

from __future__ import annotations

import logging
import time

import asyncpg
import pytest

from durable_core.sql.reachability import SETTLED_SECONDS, Reachability, reachability
from durable_postgres.outage import quiet_pool_floor, unreachable


def test_every_part_of_a_process_shares_one_outage(caplog: pytest.LogCaptureFixture) -> None:
    database = "PostgreSQL postgresql://app@db/outage-test"
    caplog.set_level(logging.DEBUG, logger="durable_core.store")
    assert unreachable(database, "opening the store", ConnectionRefusedError("refused"))
    assert unreachable(database, "listening for new work", ConnectionRefusedError("refused"))
    too_many = asyncpg.TooManyConnectionsError('too many connections for role "app"')
    assert unreachable(database, "the liveness session", too_many)
    assert reachability(database).down_since is not None
    reachability(database).reached()
    time.sleep(SETTLED_SECONDS)
    reachability(database).reached()
    assert reachability(database).down_since is None
    records = [r for r in caplog.records if database in r.getMessage()]
    assert [r.levelname for r in records] == ["WARNING", "DEBUG", "DEBUG", "INFO"]
    assert records[0].getMessage() == (
        f"{database} is unreachable (opening the store: ConnectionRefusedError: refused); "
        "retrying with backoff until it is back"
    )
    assert "too many connections" in records[2].getMessage()
    assert records[3].getMessage().startswith(f"{database} is reachable again after ")


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError("refused"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.ReadOnlySQLTransactionError("cannot execute UPDATE in a read-only transaction"),
        asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
        asyncpg.LockNotAvailableError("canceling statement due to lock timeout"),
        asyncpg.ProtocolViolationError("no more connections allowed (max_client_conn)"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_what_is_an_outage(error: Exception) -> None:
    database = f"PostgreSQL postgresql://app@db/outage-{type(error).__name__}"
    assert unreachable(database, "claim", error)
    assert reachability(database).down_since is not None


def test_a_mistake_is_not_an_outage() -> None:
    database = "PostgreSQL postgresql://app@db/not-an-outage"
    assert not unreachable(database, "claim", asyncpg.InvalidPasswordError("bad password"))
    assert not unreachable(database, "claim", asyncpg.UndefinedColumnError("no such column"))
    assert reachability(database).down_since is None


def test_open_connections_answering_do_not_end_a_refusal_of_new_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Too many clients: the pool's open connections answer while ``LISTEN`` cannot connect
    again; the outage lasts (one WARNING, not one per retry) until it has."""
    reach = Reachability("PostgreSQL postgresql://app@db/refusing")
    caplog.set_level(logging.DEBUG, logger="durable_core.store")
    too_many = asyncpg.TooManyConnectionsError("sorry, too many clients already")
    assert reach.lost("listening for new work", too_many, session=True)
    for _ in range(2):
        reach.reached()  # a claim on a connection opened before
        time.sleep(SETTLED_SECONDS)
        reach.reached()
        assert not reach.lost("listening for new work", too_many, session=True)
    reach.reached("listening for new work")
    assert reach.down_since is not None, "said back only once it has answered a while"
    time.sleep(SETTLED_SECONDS)
    reach.reached()
    assert reach.down_since is None
    levels = [r.levelname for r in caplog.records if r.name == "durable_core.store"]
    assert levels == ["WARNING", "DEBUG", "DEBUG", "INFO"]


def test_a_session_that_stopped_trying_does_not_hold_the_outage_open() -> None:
    reach = Reachability("PostgreSQL postgresql://app@db/stopped")
    reach.lost("the liveness session", ConnectionRefusedError("refused"), session=True)
    reach.stopped("the liveness session")  # its worker stopped
    reach.reached()
    time.sleep(SETTLED_SECONDS)
    reach.reached()
    assert reach.down_since is None


def test_the_pools_background_reconnects_are_quiet_during_an_outage_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet_pool_floor()
    pool_logger = logging.getLogger("asyncpg.pool")
    caplog.set_level(logging.DEBUG)
    for error in (ConnectionRefusedError("refused"), asyncpg.InvalidPasswordError("bad")):
        try:
            raise error
        except Exception:
            pool_logger.warning("Failed to restore the pool connection floor", exc_info=True)
    floor = [(r.name, r.levelname, r.exc_info is not None) for r in caplog.records]
    assert floor == [
        ("durable_postgres", "DEBUG", False),  # refused: an outage, said once elsewhere
        ("asyncpg.pool", "WARNING", True),  # a wrong password is left loud
    ]
