"""The npm dependency is bundled into the component and works inside the sandbox."""

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
