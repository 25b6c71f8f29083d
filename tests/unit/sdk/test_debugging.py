"""Debugging a failing plugin: the guest's log survives a failure, and
an author sees the Python traceback or the JavaScript stack; a production host does not.

Real componentize-py / componentize-js plugins in the real host pipeline (the harness).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sdk.harness import Harness
from tests.support.plugins import REPO_ROOT, build_test_plugin

pytestmark = pytest.mark.slow

CACHE = REPO_ROOT / ".stockade-cache" / "stockade"


@pytest.fixture(scope="module")
def echo_py() -> Path:
    return build_test_plugin("echo_py").bundle_dir


@pytest.fixture(scope="module")
def echo_js() -> Path:
    return build_test_plugin("echo_js").bundle_dir


def test_uncaught_python_exception_arrives_with_its_traceback_for_the_author(echo_py: Path) -> None:
    with Harness(echo_py, cache_dir=CACHE) as h:
        result = h.call("echo.fail", {"how": "crash"})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert result.error.message == "the tool failed: KeyError: 'unexpected'"
    trace = result.error.details["guest_traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert re.search(r'File "/0/app\.py", line \d+, in fail\n', trace)  # where, in the author's file
    assert trace.endswith("KeyError: 'unexpected'\n")
    assert "[stockade:traceback]" in result.log and "KeyError: 'unexpected'" in result.log


def test_production_host_keeps_the_log_but_never_puts_the_traceback_in_the_error(echo_py: Path) -> None:
    # What a model may be shown (error code, message, details) carries no guest internals
    # unless the host app turns debug_guest_errors on.
    with Harness(echo_py, cache_dir=CACHE, debug=False) as h:
        result = h.call("echo.fail", {"how": "crash"})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "guest_traceback" not in result.error.details
    assert "Traceback" not in result.error.message
    assert "KeyError: 'unexpected'" in result.log  # the host app's own view


def test_log_written_before_a_refusal_is_kept_on_the_result(echo_py: Path) -> None:
    # Before issue 12 the gateway dropped the log of every failed call.
    with Harness(echo_py, cache_dir=CACHE) as h:
        failed = h.call("echo.fail", {"how": "output"})  # output json cannot encode a set
    assert failed.error is not None and failed.error.code == "TOOL_FAILED"
    assert "TypeError" in failed.log and "Object of type set is not JSON serializable" in failed.log


def test_intended_tool_error_has_no_traceback(echo_py: Path) -> None:
    with Harness(echo_py, cache_dir=CACHE) as h:
        result = h.call("echo.fail", {"how": "tool"})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "guest_traceback" not in result.error.details and "[stockade:traceback]" not in result.log


def test_uncaught_javascript_error_arrives_with_its_stack(echo_js: Path) -> None:
    with Harness(echo_js, cache_dir=CACHE) as h:
        result = h.call("echojs.fail", {"how": "crash"})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    stack = result.error.details["guest_traceback"]
    assert stack.startswith("TypeError: unexpected\n")
    assert re.search(r"^@app\.js:\d+:\d+$", stack, re.M)  # SpiderMonkey's frame: the author's line
