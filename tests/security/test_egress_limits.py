"""Every egress limit, crossed (docs/design.md §8 steps 1 and 7).

Budget per call, request body size, response size while streaming (also chunked without
Content-Length), and the request deadline = min(guest timeout, call deadline, manifest
timeout) enforced on every socket operation against servers that trickle.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Iterator

import pytest

from host.egress.hygiene import MAX_HEADER_BYTES, MAX_HEADERS
from host.egress.port import HttpFailure, HttpResponse
from host.egress.session import MAX_RESPONSE_HEADERS
from host.egress.transport import MAX_INFORMATIONAL_RESPONSES
from tests.support.egress_session import FakeResolver, allow, get, make_session, request
from tests.support.servers import Exchange, LoopbackServer, ServerSet, chunked, echo, respond, trickle

API = "api.tracker.example"
MiB = 1024 * 1024


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


@pytest.fixture
def api(servers: ServerSet) -> LoopbackServer:
    return servers.new(routes={"/v1/echo": echo()})


def _resolver() -> FakeResolver:
    return FakeResolver({API: ["127.0.0.1"]})


def test_request_one_past_the_budget_refused(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_requests=3) as session:
        results = [session.send(get(api.url("/v1/echo", host=API))) for _ in range(4)]
        later = session.send(get(api.url("/v1/echo", host=API)))
    assert [type(r).__name__ for r in results] == ["HttpResponse"] * 3 + ["HttpFailure"]
    assert results[3] == HttpFailure("budget-exhausted", "at most 3 HTTP requests per call")
    assert isinstance(later, HttpFailure) and later.kind == "budget-exhausted"
    assert len(api.requests) == 3
    outcomes = [r.outcome for r in session.usage.requests]
    assert outcomes == ["ok"] * 3 + ["budget-exhausted"]  # one record, however often it retries


def test_refused_requests_count_against_the_budget(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_requests=1) as session:
        refused = session.send(get(f"http://elsewhere.example:{api.port}/"))
        after = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(refused, HttpFailure) and refused.kind == "denied"
    assert isinstance(after, HttpFailure) and after.kind == "budget-exhausted"
    assert api.requests == []


def test_zero_budget_refuses_everything(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_requests=0) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "budget-exhausted"


@pytest.mark.parametrize(("size", "ok"), [(1024, True), (1025, False)], ids=["at-limit", "one-over"])
def test_request_body_limit(api: LoopbackServer, size: int, ok: bool) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_request_bytes=1024) as session:
        result = session.send(request("POST", api.url("/v1/echo", host=API), (), b"b" * size))
    if ok:
        assert isinstance(result, HttpResponse)
        assert api.requests[0].body == b"b" * size
    else:
        assert isinstance(result, HttpFailure) and result.kind == "too-large"
        assert api.requests == []


def test_chunked_11mb_response_without_content_length_cut_while_streaming(servers: ServerSet) -> None:
    limit = 10 * MiB
    api = servers.new(routes={"/v1/big": chunked(11 * MiB, hold_after=limit + 64 * 1024, hold_s=8.0)})
    started = time.monotonic()
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_response_bytes=limit) as session:
        result = session.send(get(api.url("/v1/big", host=API)))
    elapsed = time.monotonic() - started
    assert isinstance(result, HttpFailure) and result.kind == "too-large"
    # The server paused just past the limit and waited for the client to hang up: a client
    # that buffered the whole body before checking would have waited out the 8 s pause.
    assert elapsed < 6.0
    assert api.wait_note("chunked.done") is True
    assert api.notes["chunked.client_gone"] is True
    assert api.notes["chunked.finished"] is False
    (record,) = session.usage.requests
    assert record.outcome == "too-large" and record.status == 200
    assert limit < record.bytes_received <= limit + 256 * 1024


@pytest.mark.parametrize(("size", "ok"), [(4096, True), (4097, False)], ids=["at-limit", "one-over"])
def test_response_limit_with_content_length(servers: ServerSet, size: int, ok: bool) -> None:
    api = servers.new(routes={"/v1/blob": respond(200, b"r" * size)})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_response_bytes=4096) as session:
        result = session.send(get(api.url("/v1/blob", host=API)))
    if ok:
        assert isinstance(result, HttpResponse) and len(result.body) == size
    else:
        assert isinstance(result, HttpFailure) and result.kind == "too-large"
        assert session.usage.requests[0].bytes_received == 0  # refused from the header alone


@pytest.mark.parametrize(
    ("guest_ms", "call_s", "manifest_ms"),
    [(400, 30.0, 30_000), (None, 0.4, 30_000), (None, 30.0, 400)],
    ids=["guest-timeout-smallest", "call-deadline-smallest", "manifest-timeout-smallest"],
)
def test_trickling_body_stopped_by_deadline(
    servers: ServerSet, guest_ms: int | None, call_s: float, manifest_ms: int
) -> None:
    api = servers.new(routes={"/v1/slow": trickle(b"z" * 400, interval=0.02)})  # ~8 s in all
    started = time.monotonic()
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), call_timeout_s=call_s,
                      timeout_ms=manifest_ms) as session:
        result = session.send(get(api.url("/v1/slow", host=API), timeout_ms=guest_ms))
    elapsed = time.monotonic() - started
    assert isinstance(result, HttpFailure) and result.kind == "timeout"
    assert 0.3 < elapsed < 3.0  # the whole body would take ~8 s
    assert session.usage.requests[0].outcome == "timeout"


def test_trickling_response_head_stopped_by_deadline(servers: ServerSet) -> None:
    # Each byte of the status line arrives well within any per-read timeout: only an
    # absolute deadline on every socket read stops this.
    api = servers.new(routes={"/v1/slow": trickle(b"z" * 200, interval=0.02, head=True)})
    started = time.monotonic()
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/slow", host=API), timeout_ms=400))
    assert isinstance(result, HttpFailure) and result.kind == "timeout"
    assert time.monotonic() - started < 3.0


def test_call_deadline_already_passed_sends_nothing(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), call_timeout_s=-1) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "timeout"
    assert api.requests == []


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ([(f"X-H{i}", "v") for i in range(MAX_HEADERS)], True),
        ([(f"X-H{i}", "v") for i in range(MAX_HEADERS + 1)], False),
        ([(f"X-H{i}", "v" * 8000) for i in range(MAX_HEADER_BYTES // 8000 + 1)], False),
        ([("X-Big", "v" * 8193)], False),
    ],
    ids=["max-headers", "one-header-too-many", "total-header-bytes-over", "one-value-too-long"],
)
def test_header_count_and_size_limits(api: LoopbackServer, headers: list, ok: bool) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API), headers=headers))
    if ok:
        assert isinstance(result, HttpResponse)
    else:
        assert isinstance(result, HttpFailure) and result.kind == "invalid-request"
        assert api.requests == []


def test_gzip_bomb_cut_at_decoded_limit(servers: ServerSet) -> None:
    bomb = gzip.compress(b"\0" * (8 * MiB))  # ~8 KiB on the wire
    api = servers.new(routes={"/v1/bomb": respond(200, bomb, [("Content-Encoding", "gzip")])})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), max_response_bytes=MiB) as session:
        result = session.send(get(api.url("/v1/bomb", host=API)))
    assert len(bomb) < MiB
    assert isinstance(result, HttpFailure) and result.kind == "too-large"


# -- issue 18.5 / 18.6: hostile response heads ------------------------------------------------


def _early_hints(count: int) -> Callable[[Exchange], None]:
    """``count`` interim ``103 Early Hints`` heads, then a 200 (a hostile server: endless)."""

    def handler(ex: Exchange) -> None:
        hint = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        try:
            for _ in range(count):
                ex.raw(hint)
            ex.respond(200, b"finally")
        except OSError:
            ex.close_connection()
        finally:
            ex.notes["hints.done"] = True

    return handler


def test_endless_early_hints_stream_cut_at_informational_cap(servers: ServerSet) -> None:
    # 200,000 interim heads keep an uncapped client reading for many seconds (httpcore2 skips
    # every 1xx but 101); the cap answers at once, long before the 30 s deadline.
    api = servers.new(routes={"/v1/hints": _early_hints(200_000)})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/hints", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert f"more than {MAX_INFORMATIONAL_RESPONSES} informational (1xx) responses" in result.detail
    assert session.usage.requests[0].outcome == "network"
    assert api.wait_note("hints.done") is True


@pytest.mark.parametrize("count", [1, MAX_INFORMATIONAL_RESPONSES], ids=["one-hint", "at-cap"])
def test_a_few_early_hints_are_skipped(servers: ServerSet, count: int) -> None:
    api = servers.new(routes={"/v1/hints": _early_hints(count)})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/hints", host=API)))
    assert isinstance(result, HttpResponse) and (result.status, result.body) == (200, b"finally")


def _many_headers(count: int, value: str) -> Callable[[Exchange], None]:
    def handler(ex: Exchange) -> None:
        ex.respond(200, b"ok", [(f"X-H{i}", value) for i in range(count)])

    return handler


def test_response_header_flood_refused_before_redaction(servers: ServerSet) -> None:
    # 10,500 headers fit under h11's 100 KiB head limit; with 8 staged secrets, redacting
    # them one by one cost seconds of host CPU after the read.
    api = servers.new(routes={"/v1/flood": _many_headers(10_500, "v")})
    staged = {f"s{i}": f"staged-secret-{i:04d}-value" for i in range(8)}
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), staged=staged) as session:
        result = session.send(get(api.url("/v1/flood", host=API)))
    assert result == HttpFailure("network", f"response refused: more than {MAX_RESPONSE_HEADERS} headers")
    assert session.usage.requests[0].outcome == "network:response_invalid"


def test_headers_at_the_cap_are_kept_and_redacted(servers: ServerSet) -> None:
    secret = "staged-secret-0003-value"
    api = servers.new(routes={"/v1/many": _many_headers(MAX_RESPONSE_HEADERS - 2, f"echo {secret}")})
    staged = {f"s{i}": f"staged-secret-{i:04d}-value" for i in range(8)}
    with make_session(allow=[allow(API, api.port)], resolver=_resolver(), staged=staged) as session:
        result = session.send(get(api.url("/v1/many", host=API)))
    assert isinstance(result, HttpResponse)
    echoed = [value for name, value in result.headers if name.lower().startswith("x-h")]
    assert len(echoed) == MAX_RESPONSE_HEADERS - 2
    assert set(echoed) == {"echo [REDACTED]"}
