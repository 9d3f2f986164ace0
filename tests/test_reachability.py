"""A database out of reach is said once, and its return once it has settled."""

from __future__ import annotations

import logging
import time

import pytest

from durable_core.sql.reachability import SETTLED_SECONDS, Reachability


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "durable_core.store"]


def test_an_outage_is_one_warning_and_its_end_one_line(caplog: pytest.LogCaptureFixture) -> None:
    reach = Reachability("PostgreSQL postgresql://app@db1,db2/orders")
    caplog.set_level(logging.DEBUG, logger="durable_core.store")
    assert reach.lost("claim", ConnectionRefusedError("refused"))
    assert not reach.lost("write_batch", ConnectionRefusedError("refused"))
    reach.reached()  # one answer from a server still shutting down proves nothing yet
    assert not reach.lost("claim", ConnectionResetError("reset"))
    reach.reached()
    time.sleep(SETTLED_SECONDS)
    reach.reached()
    reach.reached()  # said once
    warnings = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelname for r in warnings] == ["WARNING", "INFO"]
    assert "is unreachable (claim: ConnectionRefusedError: refused); retrying with backoff" in (
        warnings[0].getMessage()
    )
    assert " is reachable again after " in warnings[1].getMessage()
    assert reach.down_since is None
    assert reach.lost("claim", ConnectionRefusedError("refused")), "a new outage is said again"
    assert len(_lines(caplog)) == 5  # the two failures between at debug level
