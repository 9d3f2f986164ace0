"""One WARNING per database outage, whichever parts of a process retry through it."""

from __future__ import annotations

import logging

import pytest

from durable_core import outages


def test_an_outage_is_one_warning_and_ends_when_what_began_it_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    database = "PostgreSQL postgresql://app@db/outage-test"
    with caplog.at_level(logging.DEBUG, logger="durable_core.outages"):
        outages.unreachable(database, "claim", ConnectionRefusedError("refused"))
        outages.unreachable(database, "LISTEN", ConnectionRefusedError("refused"))
        outages.unreachable(database, "claim", "too many clients")
        outages.reachable(database, "LISTEN")  # old connections may work: proves nothing
        assert outages.is_unreachable(database)
        outages.reachable(database, "claim")
        assert not outages.is_unreachable(database)
        outages.reachable(database, "claim")  # nothing to end
    assert [r.levelname for r in caplog.records] == ["WARNING", "DEBUG", "DEBUG", "INFO"]
    assert (
        "is unreachable (claim failed: refused); retrying with backoff"
        in caplog.records[0].getMessage()
    )
    assert caplog.records[3].getMessage().startswith(f"{database} is reachable again after ")
