"""Egress failure paths that must fail closed with their own kind (docs/design.md §8).

Real loopback servers where the failure can be produced for real (two ``Location``
headers, a connection reset in the middle of a body); a transport that raises where
httpx2 itself must be made to fail (``InvalidURL`` cannot come from a normalized URL).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import httpx2
import pytest

from host.egress.port import HttpFailure
from host.egress.transport import Pins
from tests.support.egress_session import FakeResolver, allow, get, make_session
from tests.support.servers import Exchange, ServerSet, echo

API = "api.tracker.example"
EVIL = "evil.example"


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


def _resolver() -> FakeResolver:
    return FakeResolver({API: ["127.0.0.1"], EVIL: ["127.0.0.1"]})


def test_redirect_with_two_location_headers_refused(servers: ServerSet) -> None:
    evil = servers.new(routes={"/steal": echo()})
    api_port: list[int] = []

    def two_locations(ex: Exchange) -> None:
        ex.respond(302, b"", [("Location", f"http://{API}:{api_port[0]}/v1/ok"),
                              ("Location", evil.url("/steal", host=EVIL))])

    api = servers.new(routes={"/v1/go": two_locations, "/v1/ok": echo()})
    api_port.append(api.port)
    with make_session(allow=[allow(API, api.port), allow(EVIL, evil.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert result == HttpFailure("denied", "redirect refused: ambiguous Location")
    assert [r.outcome for r in session.usage.requests] == ["denied:invalid_redirect"]
    assert evil.requests == [] and [r.path for r in api.requests] == ["/v1/go"]


def _reset_mid_body(ex: Exchange) -> None:
    ex.start(200, [("Content-Length", "100000")], body=b"x" * 10)
    connection = ex._handler.connection
    # SO_LINGER 0: the close sends a TCP RST, so the client's read fails with ECONNRESET
    # (the handler's file object holds a reference: close it first, or the socket stays).
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ex._handler.rfile.close()
    connection.close()


def test_connection_reset_mid_body_is_a_network_failure(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/reset": _reset_mid_body})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/reset", host=API)))
    assert isinstance(result, HttpFailure)
    assert result.kind == "network", result
    assert result.detail.startswith("reading the response failed")
    assert [r.outcome for r in session.usage.requests] == ["network"]


class _Raising(httpx2.BaseTransport):
    def __init__(self, error: Exception) -> None:
        self.error = error

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        raise self.error


@pytest.mark.parametrize(
    ("error", "kind", "detail"),
    [
        (httpx2.InvalidURL("bad host"), "invalid-request", "request cannot be sent: bad host"),
        (httpx2.ReadError("connection reset by peer"), "network", "request failed: connection reset by peer"),
        (httpx2.ReadTimeout("slow"), "timeout", "the request timed out"),
    ],
    ids=["invalid-url", "read-error", "read-timeout"],
)
def test_transport_errors_map_to_their_failure_kind(error: Exception, kind: str, detail: str) -> None:
    def factory(pins: Pins) -> httpx2.BaseTransport:
        return _Raising(error)

    with make_session(allow=[allow(API, 8080)], resolver=_resolver(), transport_factory=factory) as session:
        result = session.send(get(f"http://{API}:8080/v1/x"))
    assert result == HttpFailure(kind, detail)  # type: ignore[arg-type]
    assert [r.outcome for r in session.usage.requests] == [kind]
