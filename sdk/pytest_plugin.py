"""pytest support for HTTP cassettes: a ``cassette`` marker and a ``stockade_cassette`` fixture.

Loaded by ``stockade test`` (``-p sdk.pytest_plugin``) and, once Stockade is installed, by
pytest itself (the ``pytest11`` entry point). A test asks for the fixture and passes it
to the harness::

    @pytest.mark.cassette("list-issues")            # tests/cassettes/list-issues.json
    def test_list_issues(stockade_cassette):
        with Harness(PROJECT, secrets=["tracker_token"], **stockade_cassette) as h:
            assert h.call("tracker.list-issues", {"repo": "x"}).ok

Without the marker the cassette is named after the test function. The record mode comes
from ``--stockade-record-mode`` or ``$STOCKADE_RECORD_MODE`` (what ``stockade test
--record-mode MODE`` sets), else ``none``: replay only, so CI never reaches the network.
Marker keywords (``allow_repeats``, ``match_headers``, ``record_mode``) are passed on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from sdk._cassette import RECORD_MODE_ENV, RECORD_MODES

__all__ = ["cassette_options", "pytest_addoption", "pytest_configure", "stockade_cassette"]

_UNSAFE: re.Pattern[str] = re.compile(r"[^A-Za-z0-9_.-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--stockade-record-mode``."""
    group = parser.getgroup("stockade")
    group.addoption(
        "--stockade-record-mode", choices=RECORD_MODES, default=None,
        help="record mode of Stockade HTTP cassettes (default: $STOCKADE_RECORD_MODE, else none)",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``cassette`` marker."""
    config.addinivalue_line(
        "markers",
        "cassette(name=None, **options): the HTTP cassette of this test (tests/cassettes/NAME.json)",
    )


def cassette_options(node: pytest.Item, config: pytest.Config) -> dict[str, Any]:
    """The harness keywords for ``node``: ``cassette``, ``record_mode`` and marker options.

    Raises:
        ValueError: the record mode is not one of ``none``, ``once``, ``new_episodes``, ``all``.
    """
    marker = node.get_closest_marker("cassette")
    args = marker.args if marker is not None else ()
    options = dict(marker.kwargs) if marker is not None else {}
    name = str(args[0]) if args else _UNSAFE.sub("-", node.name)
    directory = Path(str(node.path)).parent / "cassettes"
    mode = options.pop("record_mode", None) or config.getoption("stockade_record_mode", None)
    mode = mode or os.environ.get(RECORD_MODE_ENV) or "none"
    if mode not in RECORD_MODES:
        raise ValueError(f"record mode {mode!r} is not one of {', '.join(RECORD_MODES)}")
    return {"cassette": directory / f"{name}.json", "record_mode": mode, **options}


@pytest.fixture
def stockade_cassette(request: pytest.FixtureRequest) -> dict[str, Any]:
    """``Harness(..., **stockade_cassette)`` keywords for this test (see the module docstring)."""
    return cassette_options(request.node, request.config)
