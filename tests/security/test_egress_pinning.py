"""SSRF guard, DNS pinning and TLS (docs/design.md §8 step 5): connect only to vetted addresses.

The name is resolved once; the socket goes to the vetted address whatever a second
resolution would say (DNS rebinding); TLS still verifies the certificate against the
*name*; proxies from the environment are ignored; http is refused unless allowed.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpcore2
import httpx2
import pytest

from host.egress.port import HttpFailure, HttpResponse
from host.egress.transport import PinnedAsyncBackend, PinnedBackend, PinnedTransport, Pins, tls_context
from tests.support.egress_session import FakeResolver, allow, bearer, get, make_session
from tests.support.servers import LoopbackServer, ServerSet, echo
from tests.support.tls import CertAuthority

API = "api.tracker.example"


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    return CertAuthority.create(tmp_path_factory.mktemp("egress-ca"))


def test_dns_rebinding_connects_to_first_vetted_address(servers: ServerSet) -> None:
    first = servers.new(host="127.0.0.1", routes={"/v1/echo": echo()})
    try:
        second = servers.new(host="127.0.0.2", port=first.port, routes={"/v1/echo": echo()})
    except OSError:
        pytest.skip("127.0.0.2 is not bindable here")
    resolver = FakeResolver({API: [["127.0.0.1"], ["127.0.0.2"]]})
    with make_session(allow=[allow(API, first.port)], resolver=resolver) as session:
        result = session.send(get(first.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse) and result.status == 200
    assert resolver.calls == [API]  # resolved exactly once
    assert len(first.requests) == 1
    assert second.requests == []


@pytest.mark.parametrize(
    "answer",
    [
        ["127.0.0.1"],
        ["169.254.169.254"],
        ["10.0.0.7"],
        ["93.184.216.34", "127.0.0.1"],
        ["::ffff:127.0.0.1"],
        ["::1"],
        ["0.0.0.0"],
    ],
    ids=["loopback", "cloud-metadata", "private", "mixed-public-and-loopback", "mapped-loopback",
         "ipv6-loopback", "unspecified"],
)
def test_public_looking_name_resolving_to_blocked_address_refused(
    servers: ServerSet, answer: list[str]
) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    resolver = FakeResolver({API: answer})
    with make_session(allow=[allow(API, api.port)], resolver=resolver, allow_loopback=False) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[0].outcome == "denied:blocked_address"
    assert api.requests == []


def test_unresolvable_name_unreachable(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    with make_session(allow=[allow(API, api.port)], resolver=FakeResolver({})) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "network"  # not a policy denial
    assert session.usage.requests[0].outcome == "network:dns_failure"


def test_backend_never_connects_to_unvetted_host(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    pins = Pins()
    pins.pin(API, api.port, ["127.0.0.1"])
    backend = PinnedBackend(pins)
    with pytest.raises(httpcore2.ConnectError, match="not vetted"):
        backend.connect_tcp("127.0.0.1", api.port)  # the address itself was never vetted as a host
    with pytest.raises(httpcore2.ConnectError, match="not vetted"):
        backend.connect_tcp(API, api.port + 1 if api.port < 65535 else 1)
    with pytest.raises(httpcore2.ConnectError, match="unix"):
        backend.connect_unix_socket("/var/run/docker.sock")
    stream = backend.connect_tcp(API, api.port)
    try:
        assert stream.get_extra_info("server_addr")[0] == "127.0.0.1"
    finally:
        stream.close()


def test_async_backend_never_connects_to_unvetted_host(servers: ServerSet) -> None:
    # The MCP-source form of the pinned backend applies the same pin check.
    api = servers.new(routes={"/v1/echo": echo()})
    pins = Pins()
    pins.pin(API, api.port, ["127.0.0.1"])
    backend = PinnedAsyncBackend(pins)

    async def main() -> str:
        with pytest.raises(httpcore2.ConnectError, match="not vetted"):
            await backend.connect_tcp("127.0.0.1", api.port)
        with pytest.raises(httpcore2.ConnectError, match="not vetted"):
            await backend.connect_tcp(API, api.port + 1 if api.port < 65535 else 1)
        with pytest.raises(httpcore2.ConnectError, match="unix"):
            await backend.connect_unix_socket("/var/run/docker.sock")
        stream = await backend.connect_tcp(API, api.port)
        try:
            return str(stream.get_extra_info("server_addr")[0])
        finally:
            await stream.aclose()

    assert anyio.run(main) == "127.0.0.1"


def test_async_backend_refuses_to_connect_past_the_pins_deadline() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    pins = Pins()
    pins.pin(API, port, ["127.0.0.1"])
    pins.deadline = time.monotonic() - 1
    try:
        with pytest.raises(httpcore2.ConnectTimeout, match="deadline"):
            anyio.run(PinnedAsyncBackend(pins).connect_tcp, API, port)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected
    finally:
        listener.close()


def test_https_with_test_ca_verifies_and_pins(servers: ServerSet, ca: CertAuthority) -> None:
    api = servers.new(tls=ca.server_context([API]), routes={"/v1/echo": echo()})
    resolver = FakeResolver({API: ["127.0.0.1"]})
    with make_session(allow=[allow(API, api.port, scheme="https")], resolver=resolver,
                      credentials=[bearer("tok", [f"https://{API}:{api.port}"])],
                      staged={"tok": "tls-token-0123456789"}, ca_file=ca.ca_file) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse) and result.status == 200
    assert api.requests[0].header("Authorization") == "Bearer tls-token-0123456789"


@pytest.mark.parametrize("trust", ["test-ca", "system-only"])
def test_tls_certificate_for_another_name_or_unknown_ca_is_network_error(
    servers: ServerSet, ca: CertAuthority, trust: str
) -> None:
    # test-ca: the CA is trusted but the certificate names another host, so only host
    # name verification can refuse it. system-only: the CA is not trusted at all.
    names = ["other.example"] if trust == "test-ca" else [API]
    api = servers.new(tls=ca.server_context(names), routes={"/v1/echo": echo()})
    resolver = FakeResolver({API: ["127.0.0.1"]})
    with make_session(allow=[allow(API, api.port, scheme="https")], resolver=resolver,
                      credentials=[bearer("tok", [f"https://{API}:{api.port}"])],
                      staged={"tok": "tls-token-0123456789"},
                      ca_file=ca.ca_file if trust == "test-ca" else None) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert "certificate" in result.detail.lower()
    assert api.requests == []  # nothing, credentials included, went over the refused channel


def test_http_scheme_refused_unless_allowed(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    resolver = FakeResolver({API: ["127.0.0.1"]})
    with make_session(allow=[allow(API, api.port, scheme="https")], resolver=resolver) as session:
        refused = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(refused, HttpFailure) and refused.kind == "denied"
    assert session.usage.requests[0].outcome == "denied:insecure_scheme"
    assert api.requests == []
    with make_session(allow=[allow(API, api.port, scheme="http")], resolver=resolver) as session:
        allowed = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(allowed, HttpResponse)


def test_environment_proxy_is_ignored(servers: ServerSet, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = servers.new(routes={})
    api = servers.new(routes={"/v1/echo": echo()})
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.url("/"))
    resolver = FakeResolver({API: ["127.0.0.1"]})
    with make_session(allow=[allow(API, api.port)], resolver=resolver) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert proxy.requests == []
    assert len(api.requests) == 1


def test_connection_refused_is_network_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connecting is refused
        resolver = FakeResolver({API: ["127.0.0.1"]})
        with make_session(allow=[allow(API, port)], resolver=resolver) as session:
            result = session.send(get(f"http://{API}:{port}/v1/echo"))
    assert isinstance(result, HttpFailure) and result.kind == "network"


def test_transport_refuses_a_non_verifying_tls_context() -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    with pytest.raises(ValueError, match="verify"):
        PinnedTransport(Pins(), ssl_context=context)


def test_tls_context_is_cached_and_trusts_extra_ca(ca: CertAuthority, tmp_path: Path) -> None:
    assert tls_context(ca.ca_file) is tls_context(ca.ca_file)
    assert tls_context(None) is not tls_context(ca.ca_file)
    assert tls_context(ca.ca_file).check_hostname is True


def test_session_close_is_idempotent_and_send_after_close_fails_closed(servers: ServerSet) -> None:
    api: LoopbackServer = servers.new(routes={"/v1/echo": echo()})
    session = make_session(allow=[allow(API, api.port)], resolver=FakeResolver({API: ["127.0.0.1"]}))
    session.close()
    session.close()
    result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert api.requests == []


def test_ipv6_vetted_address_is_connected(servers: ServerSet) -> None:
    try:
        api = servers.new(host="::1", routes={"/v1/echo": echo()})
    except OSError:
        pytest.skip("no IPv6 loopback here")
    resolver = FakeResolver({API: ["::1"]})
    with make_session(allow=[allow(API, api.port)], resolver=resolver) as session:
        result = session.send(get(f"http://{API}:{api.port}/v1/echo"))
    assert isinstance(result, HttpResponse) and result.status == 200
    assert api.requests[0].server_address == "::1"


def test_custom_transport_factory_still_gets_every_policy_check() -> None:
    # A harness may replace the network with httpx2.MockTransport; the allowlist, DNS
    # vetting, hygiene and credential routing still run before it sees anything.
    seen: list[httpx2.Request] = []
    pins_given: list[Pins] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        seen.append(req)
        return httpx2.Response(200, headers={"Set-Cookie": "a=1"}, content=b"tok-mock-0123456789")

    def factory(pins: Pins) -> httpx2.BaseTransport:
        pins_given.append(pins)
        return httpx2.MockTransport(handler)

    resolver = FakeResolver({API: ["93.184.216.34"], "evil.example": ["93.184.216.35"]})
    with make_session(allow=[allow(API, None, scheme="https")], resolver=resolver,
                      credentials=[bearer("tok", [API])], staged={"tok": "tok-mock-0123456789"},
                      allow_loopback=False, transport_factory=factory) as session:
        ok = session.send(get(f"https://{API}/v1/x"))
        refused = session.send(get("https://evil.example/v1/x"))
    assert isinstance(ok, HttpResponse) and ok.body == b"[REDACTED]" and ok.headers == ()
    assert isinstance(refused, HttpFailure) and refused.kind == "denied"
    (only,) = seen
    assert only.headers["Authorization"] == "Bearer tok-mock-0123456789"
    assert pins_given[0].addresses(API, 443) == ("93.184.216.34",)


class _FormerStackTransport:
    """Stands in for ``httpx.MockTransport`` of the former stack (httpx 0.x is not installed)."""

    def __init__(self) -> None:
        self.requests = 0

    def handle_request(self, request: object) -> object:
        self.requests += 1
        raise AssertionError("a transport of the former stack must never be handed a request")

    def close(self) -> None:
        pass


_FormerStackTransport.__module__ = "httpx._transports.mock"
_FormerStackTransport.__qualname__ = "MockTransport"


def test_former_httpx_transport_from_a_factory_is_refused_with_the_migration() -> None:
    # A host app that still builds httpx (0.x) transports gets a TypeError naming the two
    # ways over, before any request: never a half-working session on two stacks.
    built: list[_FormerStackTransport] = []

    def factory(pins: Pins) -> httpx2.BaseTransport:
        built.append(_FormerStackTransport())
        return built[-1]  # type: ignore[return-value]

    resolver = FakeResolver({API: ["93.184.216.34"]})
    with pytest.raises(TypeError, match=r"httpx\._transports\.mock\.MockTransport, not an httpx2\.BaseTransport") as info:
        make_session(allow=[allow(API, None, scheme="https")], resolver=resolver,
                     allow_loopback=False, transport_factory=factory)
    assert "httpx2.alias_httpx()" in str(info.value) and "docs/host-apps.md" in str(info.value)
    assert len(built) == 1 and built[0].requests == 0
    assert resolver.calls == []


def test_rebinding_between_two_requests_of_one_call_never_reaches_the_new_answer(servers: ServerSet) -> None:
    # The second lookup would answer a private address; within one call the vetted answer
    # of the first request is reused, so the name stays on the address first vetted.
    api = servers.new(routes={"/v1/echo": echo()})
    resolver = FakeResolver({API: [["127.0.0.1"], ["10.0.0.5"]]})
    with make_session(allow=[allow(API, api.port)], resolver=resolver) as session:
        results = [session.send(get(api.url("/v1/echo", host=API))) for _ in range(3)]
    assert all(isinstance(r, HttpResponse) and r.status == 200 for r in results)
    assert resolver.calls == [API]
    assert len(api.requests) == 3


def test_failed_lookup_is_not_remembered(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    resolver = FakeResolver({API: [[], ["127.0.0.1"]]})
    with make_session(allow=[allow(API, api.port)], resolver=resolver) as session:
        first = session.send(get(api.url("/v1/echo", host=API)))
        second = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(first, HttpFailure) and first.kind == "network"
    assert isinstance(second, HttpResponse)
    assert resolver.calls == [API, API]
