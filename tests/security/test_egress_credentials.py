"""Credential attacks on host-performed egress (docs/design.md §8 steps 2 and 6).

The guest never supplies credentials and never sees them; the host injects only the
calling package's mappings, only where their host and path rules match, and fails closed
on a missing required secret or on two mappings writing one location.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from host.egress.port import HttpFailure, HttpResponse
from host.formats.manifest import HttpConfig
from tests.support.egress_session import (
    FakeResolver,
    allow,
    bearer,
    get,
    http_config,
    make_session,
    mapping,
)
from tests.support.servers import LoopbackServer, ServerSet, echo

API = "api.tracker.example"
TOKEN_A = "package-a-token-0123456789"
TOKEN_B = "package-b-token-9876543210"


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


@pytest.fixture
def api(servers: ServerSet) -> LoopbackServer:
    return servers.new(routes={"/v1/echo": echo(), "/public/echo": echo()})


def _resolver() -> FakeResolver:
    return FakeResolver({API: ["127.0.0.1"], "other.tracker.example": ["127.0.0.1"]})


def _host(server: LoopbackServer, name: str = API) -> str:
    return f"http://{name}:{server.port}"


def test_package_a_credentials_not_applied_to_package_b(api: LoopbackServer) -> None:
    # Package B's manifest allows the same host but maps no credential; even if A's
    # secret were staged into B's call, B's session holds only B's mappings.
    manifest_a = http_config([allow(API, api.port)], [bearer("tok_a", [_host(api)])])
    with make_session(
        allow=[allow(API, api.port)],
        credentials=(),
        staged={"tok_a": TOKEN_A},
        resolver=_resolver(),
        package="other",
    ) as session_b:
        result = session_b.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    (seen,) = api.requests
    assert seen.header("Authorization") is None
    assert TOKEN_A not in repr(seen)
    assert manifest_a.credentials[0].secret == "tok_a"  # A's mapping exists, B never sees it


def test_each_package_gets_only_its_own_secret(api: LoopbackServer) -> None:
    results = []
    for package, secret in (("alpha", "tok_a"), ("beta", "tok_b")):
        with make_session(
            allow=[allow(API, api.port)],
            credentials=[bearer(secret, [_host(api)])],
            staged={"tok_a": TOKEN_A, "tok_b": TOKEN_B},
            resolver=_resolver(),
            package=package,
        ) as session:
            results.append(session.send(get(api.url("/v1/echo", host=API))))
    assert all(isinstance(r, HttpResponse) for r in results)
    first, second = api.requests
    assert first.header("Authorization") == f"Bearer {TOKEN_A}"
    assert second.header("Authorization") == f"Bearer {TOKEN_B}"


@pytest.mark.parametrize(
    "header",
    [
        ("Authorization", "Bearer guest"),
        ("authorization", "Basic Z3Vlc3Q6eA=="),
        ("Proxy-Authorization", "Basic eA=="),
        ("Cookie", "session=1"),
        ("X-Api-Key", "k"),
        ("Api-Key", "k"),
        ("X-Auth-Token", "t"),
        ("X-Access-Token", "t"),
        ("X-Csrf-Token", "t"),
        ("X-Api-Secret", "s"),
        ("X-My-Password", "p"),
        ("X-Vendor-Credential", "c"),
        ("Host", "evil.example"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Length", "0"),
    ],
    ids=lambda h: h[0],
)
def test_guest_supplied_credential_or_routing_header_refused(api: LoopbackServer, header: tuple[str, str]) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API), headers=[header]))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert api.requests == []


@pytest.mark.parametrize(
    "header",
    [
        ("X-Evil", "a\r\nAuthorization: Bearer x"),
        ("X-Evil", "a\nb"),
        ("X-Evil", "nul\x00byte"),
        ("X-Evil", "bell\x07"),
        ("X-Evil\r\nAuthorization", "x"),
        ("X Evil", "x"),
        ("X-Evil:", "x"),
        ("", "x"),
        ("X-Evil", "caf\u00e9"),
    ],
    ids=["crlf-value", "lf-value", "nul-value", "bel-value", "crlf-name", "space-name",
         "colon-name", "empty-name", "non-ascii-value"],
)
def test_header_injection_attempt_is_invalid_request(api: LoopbackServer, header: tuple[str, str]) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API), headers=[header]))
    assert isinstance(result, HttpFailure) and result.kind == "invalid-request"
    assert api.requests == []


@pytest.mark.parametrize(
    "query",
    ["api_key=x", "apikey=x", "access_token=x", "token=x", "key=x", "secret=x", "password=x",
     "client_secret=x", "signature=x", "sig=x", "auth=x", "X-Amz-Signature=x", "api%5Fkey=x",
     "a=1&Access-Token=x", "a=1;token=x"],
)
def test_guest_query_credential_refused(api: LoopbackServer, query: str) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url(f"/v1/echo?{query}", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == "denied:credential_query"
    assert api.requests == []


@pytest.mark.parametrize("query", ["sig=abc==", "key=a=b", "page=1&sig=abc=="])
def test_guest_query_credential_with_equals_in_its_value_refused(api: LoopbackServer, query: str) -> None:
    # The name ends at the first '='; '==' padding or '=' in the value does not rename it.
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url(f"/v1/echo?{query}", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == "denied:credential_query"
    assert api.requests == []


def test_ordinary_query_parameters_pass(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo?author=bob&page=2&sort=keyword", host=API)))
    assert isinstance(result, HttpResponse)
    assert api.requests[0].query == "author=bob&page=2&sort=keyword"


def test_userinfo_in_url_refused(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(f"http://user:pw@{API}:{api.port}/v1/echo"))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[-1].outcome == "denied:userinfo"
    assert api.requests == []


@pytest.mark.parametrize(
    ("location", "header", "expected"),
    [
        ({"type": "bearer"}, "Authorization", f"Bearer {TOKEN_A}"),
        ({"type": "basic", "username": "bot"}, "Authorization",
         "Basic " + base64.b64encode(f"bot:{TOKEN_A}".encode()).decode()),
        ({"type": "header", "name": "X-Tracker-Key", "prefix": "Key "}, "X-Tracker-Key", f"Key {TOKEN_A}"),
    ],
    ids=["bearer", "basic", "header-with-prefix"],
)
def test_credential_injected_at_declared_location(
    api: LoopbackServer, location: dict, header: str, expected: str
) -> None:
    with make_session(
        allow=[allow(API, api.port)],
        credentials=[mapping("tok", location, [_host(api)], ["/v1"])],
        staged={"tok": TOKEN_A},
        resolver=_resolver(),
    ) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert api.requests[0].header(header) == expected


def test_query_credential_injected_and_guest_cannot_shadow_it(api: LoopbackServer) -> None:
    value = "q/v+al ue&x=1"
    creds = [mapping("tok", {"type": "query", "name": "tracker_id"}, [_host(api)])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"tok": value},
                      resolver=_resolver()) as session:
        ok = session.send(get(api.url("/v1/echo?page=1", host=API)))
        shadow = session.send(get(api.url("/v1/echo?tracker_id=guest", host=API)))
    assert isinstance(ok, HttpResponse)
    assert api.requests[0].query == f"page=1&tracker_id={quote(value, safe='')}"
    assert isinstance(shadow, HttpFailure) and shadow.kind == "denied"
    assert len(api.requests) == 1


def test_guest_cannot_set_header_the_host_injects(api: LoopbackServer) -> None:
    creds = [mapping("tok", {"type": "header", "name": "X-Tracker-Id", "prefix": ""}, [_host(api)])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"tok": TOKEN_A},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API), headers=[("x-tracker-id", "guest")]))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert api.requests == []


@pytest.mark.parametrize(
    ("url_path", "sent"),
    [("/v1/echo", True), ("/public/echo", False)],
    ids=["inside-path-prefix", "outside-path-prefix"],
)
def test_credential_only_within_its_path_prefix(api: LoopbackServer, url_path: str, sent: bool) -> None:
    with make_session(allow=[allow(API, api.port)], credentials=[bearer("tok", [_host(api)], ["/v1"])],
                      staged={"tok": TOKEN_A}, resolver=_resolver()) as session:
        session.send(get(api.url(url_path, host=API)))
    assert (api.requests[0].header("Authorization") is not None) is sent


def test_credential_not_sent_to_other_scheme_or_port(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    # The mapping names https on the default port; the request goes to http on another port.
    with make_session(
        allow=[allow(API, api.port), allow(API, None, scheme="https")],
        credentials=[bearer("tok", [API])],
        staged={"tok": TOKEN_A},
        resolver=_resolver(),
    ) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert api.requests[0].header("Authorization") is None


@pytest.mark.parametrize(
    "second",
    [
        {"type": "bearer"},
        {"type": "basic", "username": "bot"},
        {"type": "header", "name": "authorization", "prefix": "Token "},
    ],
    ids=["bearer-vs-bearer", "bearer-vs-basic", "bearer-vs-authorization-header"],
)
def test_conflicting_mappings_fail_the_request(api: LoopbackServer, second: dict) -> None:
    creds = [bearer("tok_a", [_host(api)], ["/v1"]), mapping("tok_b", second, [_host(api)], ["/"])]
    with make_session(allow=[allow(API, api.port)], credentials=creds,
                      staged={"tok_a": TOKEN_A, "tok_b": TOKEN_B}, resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
        outside = session.send(get(api.url("/public/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert "credential conflict" in result.detail
    assert TOKEN_A not in result.detail and TOKEN_B not in result.detail
    assert isinstance(outside, HttpResponse)  # only tok_b matches there: no conflict
    assert [r.path for r in api.requests] == ["/public/echo"]


def test_required_secret_missing_fails_closed(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], credentials=[bearer("tok", [_host(api)])],
                      staged={}, resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert result == HttpFailure("credential-unavailable", "tok")
    assert api.requests == []
    assert session.usage.requests[-1].outcome == "credential-unavailable"


def test_optional_secret_missing_is_skipped(api: LoopbackServer) -> None:
    creds = [
        mapping("opt", {"type": "header", "name": "X-Optional-Key", "prefix": ""}, [_host(api)],
                optional=True),
        bearer("tok", [_host(api)]),
    ]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"tok": TOKEN_A},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    (seen,) = api.requests
    assert seen.header("X-Optional-Key") is None
    assert seen.header("Authorization") == f"Bearer {TOKEN_A}"


def test_secret_with_newline_is_never_written_into_a_header(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], credentials=[bearer("tok", [_host(api)])],
                      staged={"tok": "abc\r\nX-Injected: 1"}, resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert result == HttpFailure("credential-unavailable", "tok")
    assert api.requests == []


def test_wildcard_mapping_matches_one_label_only(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    resolver = FakeResolver({API: ["127.0.0.1"], "deep.api.tracker.example": ["127.0.0.1"]})
    creds = [bearer("tok", [f"http://*.tracker.example:{api.port}"])]
    entries = [allow("*.tracker.example", api.port), allow("*.api.tracker.example", api.port)]
    with make_session(allow=entries, credentials=creds, staged={"tok": TOKEN_A}, resolver=resolver) as session:
        session.send(get(api.url("/v1/echo", host=API)))
        session.send(get(api.url("/v1/echo", host="deep.api.tracker.example")))
    one, deep = api.requests
    assert one.header("Authorization") == f"Bearer {TOKEN_A}"
    assert deep.header("Authorization") is None


def test_http_config_fixture_is_a_real_manifest_model() -> None:
    assert isinstance(http_config([allow(API, 8080)]), HttpConfig)


# -- issue 18.4: credential names in other spellings collide with the injected one ----------


@pytest.mark.parametrize(
    "name", ["X_Admin_Key", "X-Admin_Key", "x_admin_key", "X-ADMIN-KEY", "x-admin-key"],
    ids=["all-underscores", "mixed-separators", "lower-underscores", "upper", "lower"],
)
def test_guest_header_in_another_spelling_of_injected_header_refused(api: LoopbackServer, name: str) -> None:
    creds = [mapping("admin", {"type": "header", "name": "X-Admin-Key", "prefix": ""}, [_host(api)])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"admin": TOKEN_A},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API), headers=[(name, "attacker-key")]))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert "written by the host" in result.detail
    assert session.usage.requests[0].outcome == "denied:credential_conflict"
    assert api.requests == []


@pytest.mark.parametrize(
    "query",
    ["AppID=attacker", "APPID=attacker", "appid[]=attacker", "appid%00=attacker", "appid[0]=attacker",
     "app_id=attacker", "%61ppid=attacker", "app%49d=attacker", "appid+=attacker", "page=1;appid=attacker"],
    ids=["mixed-case", "upper", "array-suffix", "nul-suffix", "indexed-array", "underscore",
         "percent-encoded-letter", "percent-encoded-upper", "plus-space", "semicolon-separator"],
)
def test_guest_query_param_in_another_spelling_of_injected_param_refused(
    api: LoopbackServer, query: str
) -> None:
    creds = [mapping("appid", {"type": "query", "name": "appid"}, [_host(api)])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"appid": "real-app-id-0123"},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url(f"/v1/echo?{query}", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[0].outcome == "denied:credential_conflict"
    assert api.requests == []


def test_guest_copy_of_injected_param_with_equals_in_its_value_refused(api: LoopbackServer) -> None:
    creds = [mapping("appid", {"type": "query", "name": "appid"}, [_host(api)])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"appid": "real-app-id-0123"},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo?appid=attacker=1", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "denied"
    assert session.usage.requests[0].outcome == "denied:credential_conflict"
    assert api.requests == []


def test_other_query_params_beside_an_injected_one_still_pass(api: LoopbackServer) -> None:
    creds = [mapping("appid", {"type": "query", "name": "appid"}, [_host(api)])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"appid": "real-app-id-0123"},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo?app=1&appids=2&q=appid", host=API)))
    assert isinstance(result, HttpResponse)
    assert api.requests[0].query == "app=1&appids=2&q=appid&appid=real-app-id-0123"
