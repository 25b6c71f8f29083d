"""Redirect attacks on host-performed egress (docs/design.md §8 step 8).

Other hosts check only the first hop; here every hop is re-checked from normalization
through DNS vetting, every header is dropped, and credentials are routed again for the new
destination only. Real loopback servers; public-looking names map to 127.0.0.1 through a
fake resolver, loopback being reachable only because sessions set allow_loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from host.config import HostConfig
from host.egress.port import HttpFailure, HttpResponse
from host.runtime import Runtime
from tests.support import wat
from tests.support.egress_session import FakeResolver, allow, bearer, get, make_session, mapping, request
from tests.support.servers import Exchange, ServerSet, echo, redirect

SECRET = "tok-9f8e7d6c5b4a-secret"
API = "api.tracker.example"
FILES = "files.tracker.example"
EVIL = "evil.example"


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


def _resolver() -> FakeResolver:
    return FakeResolver({API: ["127.0.0.1"], FILES: ["127.0.0.1"], EVIL: ["127.0.0.1"],
                         "internal.tracker.example": ["10.0.0.5"]})


def _body(result: HttpResponse | HttpFailure) -> dict:
    assert isinstance(result, HttpResponse), result
    return json.loads(result.body)


def test_redirect_to_host_outside_allowlist_refused(servers: ServerSet) -> None:
    evil = servers.new(routes={"/steal": echo()})
    api = servers.new(routes={"/v1/go": redirect(evil.url("/steal", host=EVIL))})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpFailure)
    assert result.kind == "denied"
    assert "redirect refused" in result.detail
    assert evil.requests == []
    assert [r.outcome for r in session.usage.requests] == ["redirect", "denied:host_not_allowed"]
    assert (session.usage.requests[1].host, session.usage.requests[1].path) == (EVIL, "/steal")


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("//{evil}:{port}/steal", "host_not_allowed"),
        ("http://{api}:{api_port}@{evil}:{port}/steal", "userinfo"),
        ("/\\{evil}:{port}/steal", "invalid_url"),
        ("http://127.0.0.1:{port}/steal", "host_not_allowed"),
        ("http://{evil}.:{port}/steal", "host_not_allowed"),
        ("http://localhost:{port}/steal", "localhost"),
        ("http://2130706433:{port}/steal", "ip_literal"),
        ("file:///etc/passwd", "scheme_not_allowed"),
        ("http://{api}:{api_port}/v1/%2e%2e/%2e%2e/steal", "path_not_allowed"),
    ],
    ids=["scheme-relative", "userinfo-confusion", "backslash", "ip-literal", "trailing-dot",
         "localhost", "integer-ip", "file-scheme", "encoded-dot-segments"],
)
def test_redirect_location_tricks_refused(servers: ServerSet, location: str, reason: str) -> None:
    evil = servers.new(routes={"/steal": echo()})
    api = servers.new()
    target = location.format(evil=EVIL, port=evil.port, api=API, api_port=api.port)
    api.route("/v1/go", redirect(target))
    with make_session(allow=[allow(API, api.port, path_prefix="/v1")], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == f"denied:{reason}"
    assert evil.requests == []
    assert [r.path for r in api.requests] == ["/v1/go"]


def test_redirect_to_allowed_name_resolving_to_private_address_refused(servers: ServerSet) -> None:
    internal = servers.new(routes={"/admin": echo()})
    api = servers.new(
        routes={"/v1/go": redirect(internal.url("/admin", host="internal.tracker.example"))}
    )
    entries = [allow(API, api.port), allow("internal.tracker.example", internal.port)]
    with make_session(allow=entries, resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == "denied:blocked_address"
    assert internal.requests == []


def test_credentials_do_not_follow_redirect_to_other_allowed_host(servers: ServerSet) -> None:
    files = servers.new(routes={"/x": echo()})
    api = servers.new(routes={"/v1/go": redirect(files.url("/x", host=FILES))})
    with make_session(
        allow=[allow(API, api.port), allow(FILES, files.port)],
        credentials=[bearer("tok", [f"http://{API}:{api.port}"])],
        staged={"tok": SECRET},
        resolver=_resolver(),
    ) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpResponse) and result.status == 200
    assert api.requests[0].header("Authorization") == f"Bearer {SECRET}"
    (seen,) = files.requests
    assert seen.header("Authorization") is None
    assert SECRET not in repr(seen)


def test_credentials_rerouted_for_new_destination_only(servers: ServerSet) -> None:
    files = servers.new(routes={"/x": echo()})
    api = servers.new(routes={"/v1/go": redirect(files.url("/x", host=FILES))})
    with make_session(
        allow=[allow(API, api.port), allow(FILES, files.port)],
        credentials=[
            bearer("tok", [f"http://{API}:{api.port}"]),
            mapping("files_key", {"type": "header", "name": "X-Files-Key", "prefix": ""},
                    [f"http://{FILES}:{files.port}"]),
        ],
        staged={"tok": SECRET, "files_key": "files-key-0123456789"},
        resolver=_resolver(),
    ) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpResponse)
    assert api.requests[0].header("X-Files-Key") is None
    (seen,) = files.requests
    assert seen.header("X-Files-Key") == "files-key-0123456789"
    assert seen.header("Authorization") is None


def test_redirect_within_host_outside_credential_path_drops_credential(servers: ServerSet) -> None:
    api = servers.new()
    api.route("/v1/go", redirect("/public/x"))
    api.route("/public/x", echo())
    with make_session(
        allow=[allow(API, api.port)],
        credentials=[bearer("tok", [f"http://{API}:{api.port}"], ["/v1"])],
        staged={"tok": SECRET},
        resolver=_resolver(),
    ) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpResponse)
    first, second = api.requests
    assert first.header("Authorization") == f"Bearer {SECRET}"
    assert second.path == "/public/x" and second.header("Authorization") is None


def test_query_credential_echoed_into_location_does_not_follow(servers: ServerSet) -> None:
    files = servers.new(routes={"/x": echo()})

    def bounce(ex: Exchange) -> str:
        return files.url(f"/x?{ex.request.query}", host=FILES)

    api = servers.new(routes={"/v1/go": redirect(bounce)})
    with make_session(
        allow=[allow(API, api.port), allow(FILES, files.port)],
        credentials=[mapping("key", {"type": "query", "name": "api_key"}, [f"http://{API}:{api.port}"])],
        staged={"key": "qk/+ value=42xyz"},
        resolver=_resolver(),
    ) as session:
        result = session.send(get(api.url("/v1/go?page=2", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert "qk" not in result.detail
    assert api.requests[0].query == f"page=2&api_key={quote('qk/+ value=42xyz', safe='')}"
    assert files.requests == []
    assert session.usage.requests[-1].outcome == "denied:credential_in_redirect"


def test_redirect_drops_every_guest_header(servers: ServerSet) -> None:
    api = servers.new()
    api.route("/v1/go", redirect("/v1/echo", status=307))
    api.route("/v1/echo", echo())
    headers = [("X-Trace", "abc"), ("Content-Type", "text/plain"), ("Accept-Language", "fr")]
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(request("POST", api.url("/v1/go", host=API), headers, b"payload"))
    first, second = api.requests
    assert {"x-trace", "content-type", "accept-language"} <= first.header_names()
    assert not {"x-trace", "content-type", "accept-language"} & second.header_names()
    assert _body(result)["body"] == "payload"


@pytest.mark.parametrize(
    ("status", "method", "body"),
    [
        (301, "GET", ""),
        (302, "GET", ""),
        (303, "GET", ""),
        (307, "POST", "form=1"),
        (308, "POST", "form=1"),
    ],
    ids=["301-becomes-get", "302-becomes-get", "303-post-becomes-get-without-body",
         "307-keeps-method-and-body", "308-keeps-method-and-body"],
)
def test_redirect_method_and_body_rules(servers: ServerSet, status: int, method: str, body: str) -> None:
    api = servers.new()
    api.route("/v1/post", redirect("/v1/echo", status=status))
    api.route("/v1/echo", echo())
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(request("POST", api.url("/v1/post", host=API), (), b"form=1"))
    seen = _body(result)
    assert (seen["method"], seen["body"]) == (method, body)
    assert api.requests[1].method == method
    if method == "GET":
        assert "content-length" not in api.requests[1].header_names()


def test_redirect_method_change_is_rechecked_against_allowed_methods(servers: ServerSet) -> None:
    api = servers.new()
    api.route("/v1/post", redirect("/v1/echo", status=303))
    api.route("/v1/echo", echo())
    with make_session(allow=[allow(API, api.port, methods=["POST"])], resolver=_resolver()) as session:
        result = session.send(request("POST", api.url("/v1/post", host=API), (), b"x"))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == "denied:method_not_allowed"
    assert len(api.requests) == 1


def _chain(api_port: int, hops: int) -> dict:
    routes = {f"/v1/r{i}": redirect(f"/v1/r{i + 1}") for i in range(hops)}
    routes[f"/v1/r{hops}"] = echo()
    return routes


def test_three_redirect_hops_followed(servers: ServerSet) -> None:
    api = servers.new()
    for path, handler in _chain(api.port, 3).items():
        api.route(path, handler)
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/r0", host=API)))
    assert isinstance(result, HttpResponse) and result.status == 200
    assert [r.path for r in api.requests] == ["/v1/r0", "/v1/r1", "/v1/r2", "/v1/r3"]
    assert [r.outcome for r in session.usage.requests] == ["redirect"] * 3 + ["ok"]


def test_fourth_redirect_hop_refused(servers: ServerSet) -> None:
    api = servers.new()
    for path, handler in _chain(api.port, 4).items():
        api.route(path, handler)
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/r0", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert "too many redirects" in result.detail
    assert "/v1/r4" not in [r.path for r in api.requests]
    assert len(api.requests) == 4


def test_redirect_hops_each_resolve_and_consume_budget(servers: ServerSet) -> None:
    files = servers.new(routes={"/x": echo()})
    api = servers.new(routes={"/v1/go": redirect(files.url("/x", host=FILES))})
    resolver = _resolver()
    with make_session(allow=[allow(API, api.port), allow(FILES, files.port)], resolver=resolver,
                      max_requests=2) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
        again = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpResponse)
    assert resolver.calls == [API, FILES]
    assert isinstance(again, HttpFailure) and again.kind == "budget-exhausted"
    assert len(api.requests) == 1


def test_open_redirect_cannot_multiply_requests_past_the_budget(servers: ServerSet) -> None:
    # Issue 18.6: with hops uncounted, a budget of 1 reached the servers 4 times per call.
    files = servers.new(routes={"/x": echo()})
    api = servers.new(routes={"/v1/go": redirect(files.url("/x", host=FILES))})
    with make_session(allow=[allow(API, api.port), allow(FILES, files.port)], resolver=_resolver(),
                      max_requests=1) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert result == HttpFailure("budget-exhausted", "at most 1 HTTP requests per call")
    assert files.requests == []
    assert [(r.outcome, r.host) for r in session.usage.requests] == [
        ("redirect", API), ("budget-exhausted", FILES)]


@pytest.mark.parametrize(
    "location",
    ["http://[/x", "//[::1", "http://a]b/", "http://[evil]/", "http://[::1/x", "https://[v1.x]/"],
    ids=["unclosed-bracket", "scheme-relative-unclosed", "stray-close-bracket", "bracketed-name",
         "unclosed-ipv6", "ipvfuture"],
)
def test_malformed_location_refused_not_crashing(servers: ServerSet, location: str) -> None:
    api = servers.new(routes={"/v1/go": redirect(location)})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert result.detail.startswith("redirect refused")
    outcomes = [r.outcome for r in session.usage.requests]
    assert outcomes[0] == "redirect"
    assert outcomes[1] in ("denied:invalid_redirect", "denied:ip_literal")
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    "location",
    ["/v1/ec\tho", "/v1/\techo", "/v1/e cho", "/v1/\x7fecho"],
    ids=["tab-inside", "tab-after-slash", "space", "del"],
)
def test_location_with_tab_or_control_refused_not_repaired(servers: ServerSet, location: str) -> None:
    # urljoin would strip TAB (and CR/LF) and follow "/v1/echo": refuse, never repair. (h11
    # already refuses CR, LF and other controls in header values and trims outer whitespace.)
    api = servers.new()
    raw = location.encode().decode("unicode_escape")
    api.route("/v1/go", redirect(raw))
    api.route("/v1/echo", echo())
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == "denied:invalid_redirect"
    assert [r.path for r in api.requests] == ["/v1/go"]


@pytest.mark.parametrize(
    "query",
    ["access_token=attacker-own-token&api_key=x", "api_key=x", "page=1&client_secret=s", "X-Amz-Signature=abc",
     "sig=abc==", "key=a=b", "page=1&sig=abc=="],
    ids=["access-token-and-api-key", "api-key", "client-secret", "aws-signature",
         "equals-in-value-sig", "equals-in-value-key", "equals-in-value-after-another"],
)
def test_open_redirect_cannot_deliver_credential_query_params(servers: ServerSet, query: str) -> None:
    # A guest cannot send these itself; an open redirect must not send them either. A hop's
    # query is read like a guest's: the name ends at the first '=' (`sig=abc==` is `sig`).
    api = servers.new()
    api.route("/v1/open", redirect(f"/v1/echo?{query}"))
    api.route("/v1/echo", echo())
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/open", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == "denied:credential_query"
    assert [r.path for r in api.requests] == ["/v1/open"]


def test_malformed_location_reaches_a_real_guest_as_http_error_not_trap(
    servers: ServerSet, tmp_path: Path
) -> None:
    # Issue 18.2: urljoin raising inside the import used to trap the guest (SANDBOX_TRAP).
    api = servers.new(routes={"/v1/go": redirect("http://[/x", status=307)})
    runtime = Runtime(HostConfig(state_dir=tmp_path / "state"))
    try:
        with make_session(allow=[allow(API, api.port, methods=["POST"])], resolver=_resolver()) as session:
            result = wat.run_module(runtime, wat.http_component(), input_json=api.url("/v1/go", host=API),
                                    egress=session)
    finally:
        runtime.close()
    assert result.output == "err:0:redirect refused: the Location is not a valid URL"  # case 0 = denied
    assert [r.outcome for r in session.usage.requests] == ["redirect", "denied:invalid_redirect"]
