"""The ``WORKFLOW_*`` variables: defaults, clamping with a warning, and ``validate()``."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any

import pytest

from durable_core import ConfigurationError, FrameworkError, WorkflowConfig
from durable_core.runtime.worker import WorkflowWorker
from durable_sqlite import SQLiteStore

# variable, field, default, minimum (the reference's five, group commit's two, the drain's)
VARIABLES = [
    ("WORKFLOW_POLL_INTERVAL_MS", "poll_interval_ms", 1000, 1),
    ("WORKFLOW_CONCURRENCY", "concurrency", 4, 1),
    ("WORKFLOW_LOCK_TIMEOUT_SECS", "lock_timeout_secs", 30, 1),
    ("WORKFLOW_MAX_ATTEMPTS", "max_attempts", 3, 1),
    ("WORKFLOW_RETRY_BACKOFF_SECS", "retry_backoff_secs", 5, 0),
    ("WORKFLOW_GROUP_COMMIT", "group_commit", 1, 0),
    ("WORKFLOW_STEP_ROW_AFTER_MS", "step_row_after_ms", 100, 0),
    ("WORKFLOW_DRAIN_TIMEOUT_SECS", "drain_timeout_secs", 30, 0),
]
IDS = [v[0] for v in VARIABLES]


def warnings_for(caplog: pytest.LogCaptureFixture, variable: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING
        and r.name == "durable_core.config"
        and variable in r.message
    ]


def test_defaults_when_nothing_is_set(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="durable_core.config"):
        config = WorkflowConfig.from_env({})
    assert config == WorkflowConfig()
    for _, field, default, _ in VARIABLES:
        assert getattr(config, field) == default
    assert caplog.records == []
    assert config.validate() is config


@pytest.mark.parametrize(("variable", "field", "default", "minimum"), VARIABLES, ids=IDS)
def test_unset_or_empty_gives_the_default(
    caplog: pytest.LogCaptureFixture, variable: str, field: str, default: int, minimum: int
) -> None:
    with caplog.at_level(logging.WARNING, logger="durable_core.config"):
        assert getattr(WorkflowConfig.from_env({}), field) == default
        assert getattr(WorkflowConfig.from_env({variable: ""}), field) == default
        assert getattr(WorkflowConfig.from_env({variable: "   "}), field) == default
    assert warnings_for(caplog, variable) == []


@pytest.mark.parametrize(("variable", "field", "default", "minimum"), VARIABLES, ids=IDS)
@pytest.mark.parametrize("garbled", ["abc", "12ms", "1.5", "0x10", "--3", "1e3"])
def test_garbled_value_falls_back_to_the_default_with_a_warning(
    caplog: pytest.LogCaptureFixture,
    variable: str,
    field: str,
    default: int,
    minimum: int,
    garbled: str,
) -> None:
    with caplog.at_level(logging.WARNING, logger="durable_core.config"):
        config = WorkflowConfig.from_env({variable: garbled})
    assert getattr(config, field) == default
    (record,) = warnings_for(caplog, variable)
    assert repr(garbled) in record.message and str(default) in record.message
    # Only the garbled variable is touched.
    assert replace(config, **{field: getattr(WorkflowConfig(), field)}) == WorkflowConfig()
    config.validate()


@pytest.mark.parametrize(("variable", "field", "default", "minimum"), VARIABLES, ids=IDS)
def test_below_minimum_is_clamped_to_the_minimum_with_a_warning(
    caplog: pytest.LogCaptureFixture, variable: str, field: str, default: int, minimum: int
) -> None:
    for raw in (str(minimum - 1), str(minimum - 1000)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="durable_core.config"):
            config = WorkflowConfig.from_env({variable: raw})
        assert getattr(config, field) == minimum
        (record,) = warnings_for(caplog, variable)
        assert raw in record.message and "minimum" in record.message
        config.validate()


@pytest.mark.parametrize(("variable", "field", "default", "minimum"), VARIABLES, ids=IDS)
def test_valid_values_are_kept_without_a_warning(
    caplog: pytest.LogCaptureFixture, variable: str, field: str, default: int, minimum: int
) -> None:
    with caplog.at_level(logging.WARNING, logger="durable_core.config"):
        for raw, expected in ((str(minimum), minimum), ("7", 7), (" 250 ", 250), ("+9", 9)):
            assert getattr(WorkflowConfig.from_env({variable: raw}), field) == expected
    assert warnings_for(caplog, variable) == []


def test_from_env_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, _, _, _ in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("WORKFLOW_CONCURRENCY", "16")
    monkeypatch.setenv("WORKFLOW_RETRY_BACKOFF_SECS", "0")
    config = WorkflowConfig.from_env()
    assert (config.concurrency, config.retry_backoff_secs) == (16, 0)
    assert config.max_attempts == 3


def test_derived_values() -> None:
    config = WorkflowConfig(poll_interval_ms=250, lock_timeout_secs=30, retry_backoff_secs=5)
    assert config.poll_interval == 0.25
    assert config.heartbeat_interval == 15
    assert [config.retry_delay(n) for n in (1, 2, 3)] == [5, 10, 15]
    assert WorkflowConfig(retry_backoff_secs=0).retry_delay(4) == 0


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"poll_interval_ms": 0}, ["poll_interval_ms"]),
        ({"concurrency": 0}, ["concurrency"]),
        ({"lock_timeout_secs": 0}, ["lock_timeout_secs"]),
        ({"max_attempts": 0}, ["max_attempts"]),
        ({"retry_backoff_secs": -1}, ["retry_backoff_secs"]),
        ({"concurrency": -3, "max_attempts": 0}, ["concurrency", "max_attempts"]),
        ({"lock_timeout_secs": math.nan}, ["lock_timeout_secs"]),
        ({"concurrency": "4"}, ["concurrency"]),
        ({"max_attempts": True}, ["max_attempts"]),
        ({"concurrency": 2.5}, ["concurrency"]),
        ({"max_attempts": None}, ["max_attempts"]),
    ],
)
def test_validate_names_every_bad_field(overrides: dict[str, Any], named: list[str]) -> None:
    config = WorkflowConfig(**overrides)
    with pytest.raises(ConfigurationError) as caught:
        config.validate()
    assert isinstance(caught.value, FrameworkError)
    message = str(caught.value)
    for field in named:
        assert field in message
    good = {v[1] for v in VARIABLES} - set(named)
    for field in good:
        assert field not in message


def test_validate_accepts_valid_programmatic_configs() -> None:
    for config in (
        WorkflowConfig(),
        WorkflowConfig(poll_interval_ms=1, concurrency=1, lock_timeout_secs=1, max_attempts=1),
        WorkflowConfig(poll_interval_ms=0.5 * 10, lock_timeout_secs=2.5, retry_backoff_secs=0),
    ):
        assert config.validate() is config


async def test_worker_refuses_an_invalid_config(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(ConfigurationError, match="concurrency"):
        WorkflowWorker(sqlite_store, WorkflowConfig(concurrency=0))
