"""Request headers that re-route a request on common servers (docs/design.md §8 step 2).

A guest must not turn an allowed ``GET /v1/issues`` into a ``DELETE`` (method override), a
request for another path (``X-Original-URL``), or a request from a trusted address
(``X-Forwarded-For``) next to the credentials the host injects; nor reach a host-owned
header through an underscore spelling that nginx, CGI and WSGI treat as the same header.
Each case is sent through a real session to a real loopback server, which must see nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from host.egress.port import HttpFailure, HttpResponse
from tests.support.egress_session import FakeResolver, allow, bearer, get, make_session
from tests.support.servers import LoopbackServer, ServerSet, echo

API = "api.tracker.example"
SECRET = "tok-headers-0123456789"

REROUTING = [
    ("X-HTTP-Method-Override", "DELETE"),
    ("X-HTTP-Method", "DELETE"),
    ("X-Method-Override", "PUT"),
    ("x-http-method-override", "DELETE"),
    ("X_HTTP_Method_Override", "DELETE"),
    ("X-Original-URL", "/admin/delete-all"),
    ("X-Rewrite-URL", "/admin"),
    ("X-Original-Host", "internal.example"),
    ("Forwarded", "for=127.0.0.1;host=internal"),
    ("X-Forwarded-For", "127.0.0.1"),
    ("X-Forwarded-Host", "internal.example"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Prefix", "/admin"),
    ("X-Forwarded-Port", "8443"),
    ("X_Forwarded_For", "127.0.0.1"),
    ("x_forwarded_host", "internal.example"),
    ("X-Real-IP", "127.0.0.1"),
    ("X_Real_IP", "127.0.0.1"),
    ("True-Client-IP", "127.0.0.1"),
    ("X-Client-IP", "127.0.0.1"),
]
UNDERSCORE_HOST_OWNED = [
    ("Content_Length", "0"),
    ("Transfer_Encoding", "chunked"),
    ("CONTENT_LENGTH", "5"),
    ("Proxy_Connection", "close"),
    ("Keep_Alive", "300"),
]


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


@pytest.fixture
def api(servers: ServerSet) -> LoopbackServer:
    return servers.new(routes={"/v1/echo": echo()})


def _send(api: LoopbackServer, name: str, value: str) -> HttpResponse | HttpFailure:
    with make_session(
        allow=[allow(API, api.port, methods=["GET"])],
        credentials=[bearer("tok", [f"http://{API}:{api.port}"])],
        staged={"tok": SECRET},
        resolver=FakeResolver({API: ["127.0.0.1"]}),
    ) as session:
        result = session.send(get(api.url("/v1/echo", host=API), headers=[(name, value)]))
    assert [r.outcome for r in session.usage.requests] == ["denied:forbidden_header"]
    return result


@pytest.mark.parametrize(("name", "value"), REROUTING, ids=[n for n, _ in REROUTING])
def test_rerouting_header_refused_before_sending(api: LoopbackServer, name: str, value: str) -> None:
    result = _send(api, name, value)
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert name in result.detail
    assert api.requests == []


@pytest.mark.parametrize(("name", "value"), UNDERSCORE_HOST_OWNED, ids=[n for n, _ in UNDERSCORE_HOST_OWNED])
def test_underscore_spelling_of_host_owned_header_refused(api: LoopbackServer, name: str, value: str) -> None:
    result = _send(api, name, value)
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert "set by the host" in result.detail
    assert api.requests == []


@pytest.mark.parametrize("name", ["X-Request-Id", "X-Forwarding-Note", "X-Realm", "Accept-Language"])
def test_ordinary_headers_near_the_family_still_pass(api: LoopbackServer, name: str) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=FakeResolver({API: ["127.0.0.1"]})) as session:
        result = session.send(get(api.url("/v1/echo", host=API), headers=[(name, "1")]))
    assert isinstance(result, HttpResponse) and result.status == 200
    assert api.requests[0].header(name) == "1"
