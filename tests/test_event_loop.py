"""Which event loop ``durable worker`` runs on: ``$DURABLE_EVENT_LOOP``."""

from __future__ import annotations

import sys

import pytest

from durable_core.cli.common import event_loop_options
from durable_core.errors import ConfigurationError


def test_auto_and_uvloop_run_on_uvloop_when_it_is_installed() -> None:
    import uvloop  # noqa: F401 - in the dev extras: it must be there, not skipped

    assert event_loop_options({}) == {"use_uvloop": True}
    assert event_loop_options({"DURABLE_EVENT_LOOP": "auto"}) == {"use_uvloop": True}
    assert event_loop_options({"DURABLE_EVENT_LOOP": " UVLOOP "}) == {"use_uvloop": True}


def test_asyncio_never_uses_uvloop() -> None:
    assert event_loop_options({"DURABLE_EVENT_LOOP": "asyncio"}) == {}


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert event_loop_options({}) == {}
    with pytest.raises(ConfigurationError, match=r"DURABLE_EVENT_LOOP=uvloop, but uvloop is"):
        event_loop_options({"DURABLE_EVENT_LOOP": "uvloop"})


def test_an_unknown_loop_names_the_variable_and_the_choices() -> None:
    with pytest.raises(ConfigurationError) as caught:
        event_loop_options({"DURABLE_EVENT_LOOP": "trio"})
    assert str(caught.value) == "DURABLE_EVENT_LOOP='trio': use one of auto, uvloop, asyncio"
