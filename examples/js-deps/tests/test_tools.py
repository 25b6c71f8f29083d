"""The npm dependencies (an ES module and a CommonJS one) are bundled into the component
and work inside the sandbox."""

from pathlib import Path

import pytest

from sdk.harness import Harness

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def h():
    with Harness(PROJECT) as harness:
        yield harness


def test_size_uses_pretty_bytes_inside_the_sandbox(h):
    result = h.call("bytesize.size", {"bytes": 1_500_000})
    assert result.ok, result.error
    assert result.output == {"text": "1.5 MB"}


def test_zero(h):
    assert h.call("bytesize.size", {"bytes": 0}).output == {"text": "0 B"}


def test_parse_uses_the_commonjs_package_inside_the_sandbox(h):
    assert h.call("bytesize.parse", {"text": "1.5MB"}).output == {"bytes": 1_572_864}


def test_parse_refuses_what_is_not_a_size(h):
    result = h.call("bytesize.parse", {"text": "lots"})
    assert not result.ok and result.error.code == "INPUT_INVALID"
