"""Decompression bombs from an allowlisted (hostile or compromised) server.

The host asks for ``Accept-Encoding: identity``; these servers compress anyway. Every
test measures the Python heap peak of the whole request with tracemalloc (zlib's output
buffers are Python bytes, so they are counted) and holds it under the response limit plus
32 MiB, whatever the decoded size would have been.
"""

from __future__ import annotations

import functools
import gzip
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import pytest

from host.egress.decoding import MAX_DECODE_RATIO
from host.egress.port import HttpFailure, HttpResponse
from tests.support.egress_session import FakeResolver, allow, get, make_session
from tests.support.servers import LoopbackServer, ServerSet, redirect, respond

API = "api.tracker.example"
MiB = 1024 * 1024
LIMIT = 1 * MiB
BOUND = LIMIT + 32 * MiB  # limit + 32 MiB at most


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


def _resolver() -> FakeResolver:
    return FakeResolver({API: ["127.0.0.1"]})


def _zeros_compressed(size: int, wbits: int) -> bytes:
    """``size`` zero bytes compressed in a stream (never held decoded in memory)."""
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = b"\0" * MiB
    parts = [z.compress(block) for _ in range(size // MiB)]
    return b"".join(parts) + z.flush()


@functools.cache
def _gzip_zeros(size: int) -> bytes:
    return _zeros_compressed(size, 16 + zlib.MAX_WBITS)


@functools.cache
def _deflate_zeros(size: int, raw: bool) -> bytes:
    return _zeros_compressed(size, -zlib.MAX_WBITS if raw else zlib.MAX_WBITS)


def _peak_of(send: Callable[[], HttpResponse | HttpFailure]) -> tuple[HttpResponse | HttpFailure, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = send()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def _fetch(api: LoopbackServer, path: str, limit: int = LIMIT) -> tuple[HttpResponse | HttpFailure, int, str]:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_response_bytes=limit) as session:
        result, peak = _peak_of(lambda: session.send(get(api.url(path, host=API))))
    return result, peak, session.usage.requests[-1].outcome


def test_stacked_gzip_gzip_bomb_refused_under_memory_bound(servers: ServerSet) -> None:
    # 256 MiB of zeros, gzipped twice: about a kilobyte on the wire.
    bomb = gzip.compress(_gzip_zeros(256 * MiB), 9)
    api = servers.new(routes={"/v1/bomb": respond(200, bomb, [("Content-Encoding", "gzip, gzip")])})
    result, peak, outcome = _fetch(api, "/v1/bomb")
    assert len(bomb) < 4096
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert "stacked content-encodings are refused" in result.detail
    assert outcome == "network:response_invalid"
    assert peak < BOUND


def test_stacked_encodings_in_two_headers_refused(servers: ServerSet) -> None:
    bomb = gzip.compress(gzip.compress(b"hello"))
    headers = [("Content-Encoding", "gzip"), ("Content-Encoding", "gzip")]
    api = servers.new(routes={"/v1/bomb": respond(200, bomb, headers)})
    result, _, outcome = _fetch(api, "/v1/bomb")
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert outcome == "network:response_invalid"


@pytest.mark.parametrize(
    ("encoding", "make"),
    [
        ("gzip", lambda: _gzip_zeros(128 * MiB)),
        ("x-gzip", lambda: _gzip_zeros(128 * MiB)),
        ("deflate", lambda: _deflate_zeros(128 * MiB, False)),
        ("deflate", lambda: _deflate_zeros(128 * MiB, True)),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw"],
)
def test_single_layer_bomb_stays_under_memory_bound(
    servers: ServerSet, encoding: str, make: Callable[[], bytes]
) -> None:
    bomb = make()
    api = servers.new(routes={"/v1/bomb": respond(200, bomb, [("Content-Encoding", encoding)])})
    result, peak, outcome = _fetch(api, "/v1/bomb")
    assert len(bomb) < LIMIT  # the wire size passes the limit: only decoding can stop it
    assert isinstance(result, HttpFailure) and result.kind == "too-large"
    assert outcome == "too-large"
    assert peak < BOUND


def test_bomb_behind_a_redirect_stays_under_memory_bound(servers: ServerSet) -> None:
    bomb = _gzip_zeros(128 * MiB)
    api = servers.new(routes={
        "/v1/go": redirect("/v1/bomb"),
        "/v1/bomb": respond(200, bomb, [("Content-Encoding", "gzip")]),
    })
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_response_bytes=LIMIT) as session:
        result, peak = _peak_of(lambda: session.send(get(api.url("/v1/go", host=API))))
    assert isinstance(result, HttpFailure) and result.kind == "too-large"
    assert [r.outcome for r in session.usage.requests] == ["redirect", "too-large"]
    assert peak < BOUND


def test_bomb_under_a_large_limit_stopped_by_the_ratio_cap(servers: ServerSet) -> None:
    limit = 32 * MiB
    bomb = _gzip_zeros(30 * MiB)  # decodes to less than the limit, ~1000:1
    api = servers.new(routes={"/v1/bomb": respond(200, bomb, [("Content-Encoding", "gzip")])})
    result, peak, outcome = _fetch(api, "/v1/bomb", limit=limit)
    assert isinstance(result, HttpFailure) and result.kind == "too-large"
    assert f"{MAX_DECODE_RATIO}:1" in result.detail
    assert outcome == "too-large"
    assert peak < 8 * MiB  # stopped just past the 1 MiB floor, long before the limit


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip;q=1", "x-bomb"])
def test_unknown_content_encoding_refused(servers: ServerSet, encoding: str) -> None:
    api = servers.new(routes={"/v1/x": respond(200, b"whatever", [("Content-Encoding", encoding)])})
    result, _, outcome = _fetch(api, "/v1/x")
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert outcome == "network:response_invalid"


def test_corrupt_gzip_refused(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/x": respond(200, b"\x1f\x8bnot gzip at all", [("Content-Encoding", "gzip")])})
    result, _, outcome = _fetch(api, "/v1/x")
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert outcome == "network:response_invalid"


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("identity", lambda b: b),
        ("gzip, identity", gzip.compress),
    ],
    ids=["gzip", "deflate", "identity", "gzip-with-identity"],
)
def test_honest_compressed_response_is_decoded(servers: ServerSet, encoding: str, encode: Callable[[bytes], bytes]) -> None:
    payload = b'{"issues": [' + b",".join(b'{"id": %d}' % i for i in range(5000)) + b"]}"
    api = servers.new(routes={"/v1/x": respond(200, encode(payload), [("Content-Encoding", encoding)])})
    result, _, outcome = _fetch(api, "/v1/x")
    assert isinstance(result, HttpResponse) and result.body == payload
    assert outcome == "ok"
    assert "content-encoding" not in {name.lower() for name, _ in result.headers}


def test_two_gzip_members_are_one_body(servers: ServerSet) -> None:
    body = gzip.compress(b"first ") + gzip.compress(b"second")
    api = servers.new(routes={"/v1/x": respond(200, body, [("Content-Encoding", "gzip")])})
    result, _, _ = _fetch(api, "/v1/x")
    assert isinstance(result, HttpResponse) and result.body == b"first second"


def test_decoded_body_exactly_at_the_limit_passes_and_one_over_fails(servers: ServerSet) -> None:
    at, over = b"a" * LIMIT, b"a" * (LIMIT + 1)
    api = servers.new(routes={
        "/v1/at": respond(200, gzip.compress(at), [("Content-Encoding", "gzip")]),
        "/v1/over": respond(200, gzip.compress(over), [("Content-Encoding", "gzip")]),
    })
    ok, _, _ = _fetch(api, "/v1/at")
    refused, _, _ = _fetch(api, "/v1/over")
    assert isinstance(ok, HttpResponse) and ok.body == at
    assert isinstance(refused, HttpFailure) and refused.kind == "too-large"
