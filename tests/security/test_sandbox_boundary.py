"""Values crossing the WIT boundary cost the host O(declared limits).

``stockade:plugin@1.0.0`` carried request and response headers as ``list<header>`` and
bodies as ``list<u8>``; wasmtime-py lifts such lists element by element in Python before
any host check runs. Measured before the fix: 600 000 empty headers cost 30 s of host CPU
and 0.5 GB under a 1 s deadline; a 2 MiB body 6 s; bodies over ~3 MiB trapped ("fuel
allocated for hostcalls has been exhausted") instead of answering ``too-large``.
``stockade:plugin@1.1.0`` carries each as one ``string`` (bodies latin-1 mapped, headers
a JSON block), moved with one buffer copy and refused over its caps before parsing.

Each test runs a hand-written guest (tests/support/wat.py) through the real runtime.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator

import pytest

from host.config import HostConfig
from host.egress.port import HttpFailure, HttpRequest, HttpResponse
from host.runtime import Runtime, SandboxLimits
from host.runtime.imports import MAX_HEADER_BLOCK_CHARS, MAX_REQUEST_HEADERS
from tests.support import wat

MiB = 1 << 20
LIMITS = SandboxLimits(fuel=500_000_000, memory_bytes=96 * MiB, timeout_ms=5_000, max_log_bytes=4096)
URL = "https://api.example/v1/upload"
INVALID_REQUEST = 2  # case index of http-error
TOO_LARGE = 3


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("state")))
    yield runtime
    runtime.close()


class EchoEgress:
    """Answers 200 with the request's body and headers; records every request."""

    def __init__(self) -> None:
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        self.requests.append(request)
        return HttpResponse(200, request.headers, request.body or b"")


def _run(rt: Runtime, module: bytes, egress: EchoEgress) -> str:
    return wat.run_module(rt, module, input_json=URL, limits=LIMITS, egress=egress).output


def test_600k_empty_headers_refused_before_parsing_with_bounded_memory(rt: Runtime) -> None:
    egress = EchoEgress()
    module = wat.http_boundary_component(header_count=600_000, pages=80)
    tracemalloc.start()
    try:
        output = _run(rt, module, egress)  # within its 5 s deadline, or SANDBOX_TIMEOUT
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert output == f"err:{INVALID_REQUEST}:the header block is over {MAX_HEADER_BLOCK_CHARS} characters"
    assert egress.requests == []
    assert peak < 32 * MiB, f"host Python memory peaked at {peak / MiB:.1f} MiB"


def test_8mib_body_round_trip_through_the_host(rt: Runtime) -> None:
    egress = EchoEgress()
    size = 8 * MiB
    module = wat.http_boundary_component(body_bytes=size, fill="latin1", pages=260)
    output = _run(rt, module, egress)
    [request] = egress.requests
    assert request.body == b"\xe9" * size  # U+00E9 is byte 0xE9: one byte per character
    assert output == f"ok:200:{2 * size}"  # the guest got 8 Mi characters of é (2 UTF-8 bytes each)


def test_9mib_request_body_answers_too_large_not_a_trap(rt: Runtime) -> None:
    egress = EchoEgress()
    module = wat.http_boundary_component(body_bytes=9 * MiB, fill="ascii", pages=150)
    assert _run(rt, module, egress) == f"err:{TOO_LARGE}:"
    assert egress.requests == []


def test_body_character_above_u00ff_is_invalid_request(rt: Runtime) -> None:
    egress = EchoEgress()
    module = wat.http_boundary_component(fill="text", body_text="price: 5 €")
    output = _run(rt, module, egress)
    assert output.startswith(f"err:{INVALID_REQUEST}:the body holds a character above U+00FF")
    assert egress.requests == []


def test_binary_response_body_reaches_the_guest_byte_for_byte(rt: Runtime) -> None:
    body = bytes(range(256)) * 4

    class Binary:
        def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
            return HttpResponse(200, (("Content-Type", "application/octet-stream"),), body)

    result = wat.run_module(rt, wat.http_component(), input_json=URL, egress=Binary())
    assert result.output == "ok:200:" + body.decode("latin-1")


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("not json", "the header block is not JSON"),
        ('{"a": "b"}', "the header block must be a JSON array"),
        ('[["a"]]', "each header must be a [name, value] pair of strings"),
        ('[["a", 1]]', "each header must be a [name, value] pair of strings"),
        ('[["a", "b", "c"]]', "each header must be a [name, value] pair of strings"),
        ("[" * 5000 + "]" * 5000, "the header block is not JSON"),
        (json.dumps([["x", "y"]] * (MAX_REQUEST_HEADERS + 1)), f"more than {MAX_REQUEST_HEADERS} headers"),
        (json.dumps([["x", "y" * MAX_HEADER_BLOCK_CHARS]]),
         f"the header block is over {MAX_HEADER_BLOCK_CHARS} characters"),
    ],
    ids=["not-json", "object", "short-pair", "number-value", "triple", "deep-nesting", "too-many", "too-long"],
)
def test_malformed_header_block_is_invalid_request(rt: Runtime, block: str, message: str) -> None:
    egress = EchoEgress()
    module = wat.http_boundary_component(headers=block, pages=4)
    assert _run(rt, module, egress) == f"err:{INVALID_REQUEST}:{message}"
    assert egress.requests == []


def test_header_block_at_the_caps_is_accepted(rt: Runtime) -> None:
    egress = EchoEgress()
    pairs = [[f"x-h{i}", "v"] for i in range(MAX_REQUEST_HEADERS)]
    module = wat.http_boundary_component(headers=json.dumps(pairs), pages=4)
    assert _run(rt, module, egress) == "ok:200:0"
    assert [list(pair) for pair in egress.requests[0].headers] == pairs
