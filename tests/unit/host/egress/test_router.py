"""The credential router: matching, ordering, conflicts, injection (docs/design.md §8 step 6)."""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass
from typing import Any

import pytest

from host.egress.router import CredentialRouter, Route, apply_injections
from host.egress.urls import normalize_url, parse_host_pattern, path_matches
from host.errors import CredentialUnavailable, EgressDenied
from host.formats.manifest import CredentialMapping
from host.secrets.store import SecretValue


def _mapping(secret: str, location: dict[str, Any], hosts: list[str], prefixes: list[str] | None = None,
             *, optional: bool = False) -> CredentialMapping:
    document = {"secret": secret, "location": location, "hosts": hosts,
                "path_prefixes": prefixes or ["/"], "optional": optional}
    return CredentialMapping.model_validate_json(json.dumps(document))


BEARER = {"type": "bearer"}


def _secrets(route_order: tuple[Route, ...]) -> list[str]:
    return [route.secret for route in route_order]


@pytest.mark.parametrize(
    ("pattern", "url", "matches"),
    [
        ("api.example.com", "https://api.example.com/x", True),
        ("api.example.com", "https://API.Example.com./x", True),
        ("api.example.com", "http://api.example.com/x", False),
        ("api.example.com", "https://api.example.com:8443/x", False),
        ("api.example.com:8443", "https://api.example.com:8443/x", True),
        ("http://api.example.com", "http://api.example.com/x", True),
        ("http://api.example.com", "https://api.example.com/x", False),
        ("*.example.com", "https://api.example.com/x", True),
        ("*.example.com", "https://a.example.com/x", True),
        ("*.example.com", "https://example.com/x", False),
        ("*.example.com", "https://a.b.example.com/x", False),
        ("*.example.com", "https://api.example.com.evil.net/x", False),
        ("api.example.com", "https://api.example.com.evil.net/x", False),
        ("api.example.com", "https://xapi.example.com/x", False),
        ("203.0.113.9", "https://203.0.113.9/x", True),
        ("[2001:db8::1]", "https://[2001:db8:0::1]/x", True),
    ],
)
def test_host_rules_match_allowlist_rules(pattern: str, url: str, matches: bool) -> None:
    router = CredentialRouter([_mapping("tok", BEARER, [pattern])])
    assert bool(router.match(normalize_url(url))) is matches


@pytest.mark.parametrize("host", ["evilexample.com", "evil-example.com", "xexample.com"])
def test_wildcard_credential_needs_its_dot_evilexample_com_gets_nothing(host: str) -> None:
    router = CredentialRouter([_mapping("tok", BEARER, ["*.example.com"])])
    assert _secrets(router.match(normalize_url("https://api.example.com/"))) == ["tok"]
    assert router.match(normalize_url(f"https://{host}/")) == ()
    assert router.match(normalize_url(f"https://api.{host}/")) == ()


@pytest.mark.parametrize(
    ("prefix", "path", "matches"),
    [
        ("/v1", "/v1", True), ("/v1", "/v1/", True), ("/v1", "/v1/issues", True),
        ("/v1", "/v10", False), ("/v1", "/v1.json", False), ("/v1", "/", False),
        ("/v1/issues", "/v1/issues/7/comments", True), ("/v1/issues", "/v1/issue", False),
        ("/", "/anything", True), ("/v1", "/v2/../v1/x", True), ("/v1", "/v1/../v2", False),
        ("/a%20b", "/a%20b/c", True), ("/v1", "/V1", False),
    ],
)
def test_path_rules_match_at_segment_boundary(prefix: str, path: str, matches: bool) -> None:
    router = CredentialRouter([_mapping("tok", BEARER, ["api.example.com"], [prefix])])
    assert bool(router.match(normalize_url(f"https://api.example.com{path}"))) is matches


def test_most_specific_last() -> None:
    router = CredentialRouter([
        _mapping("deep", {"type": "header", "name": "X-Deep", "prefix": ""}, ["api.example.com"], ["/v1/a"]),
        _mapping("root_literal", {"type": "header", "name": "X-Root-L", "prefix": ""}, ["api.example.com"]),
        _mapping("root_wild", {"type": "header", "name": "X-Root-W", "prefix": ""}, ["*.example.com"]),
        _mapping("mid_wild", {"type": "header", "name": "X-Mid-W", "prefix": ""}, ["*.example.com"], ["/v1"]),
        _mapping("mid_lit", {"type": "header", "name": "X-Mid-L", "prefix": ""}, ["api.example.com"], ["/v1"]),
    ])
    routes = router.match(normalize_url("https://api.example.com/v1/a/b"))
    assert _secrets(routes) == ["root_wild", "root_literal", "mid_wild", "mid_lit", "deep"]


def test_mapping_with_several_hosts_uses_its_best_match() -> None:
    router = CredentialRouter([
        _mapping("multi", {"type": "header", "name": "X-M", "prefix": ""},
                 ["*.example.com", "api.example.com"], ["/", "/v1"]),
        _mapping("single", {"type": "header", "name": "X-S", "prefix": ""}, ["api.example.com"], ["/v1"]),
    ])
    assert _secrets(router.match(normalize_url("https://api.example.com/v1/x"))) == ["multi", "single"]
    assert _secrets(router.match(normalize_url("https://www.example.com/v1/x"))) == ["multi"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (BEARER, BEARER),
        (BEARER, {"type": "basic", "username": "u"}),
        (BEARER, {"type": "header", "name": "Authorization", "prefix": "Token "}),
        ({"type": "header", "name": "X-Key", "prefix": ""}, {"type": "header", "name": "x-key", "prefix": "K "}),
        ({"type": "query", "name": "k"}, {"type": "query", "name": "k"}),
    ],
    ids=["bearer-bearer", "bearer-basic", "bearer-authorization-header", "header-case", "query-query"],
)
def test_two_mappings_writing_one_location_conflict(first: dict, second: dict) -> None:
    router = CredentialRouter([
        _mapping("a", first, ["api.example.com"]),
        _mapping("b", second, ["*.example.com"], ["/v1"], optional=True),
    ])
    with pytest.raises(EgressDenied, match="credential conflict") as info:
        router.match(normalize_url("https://api.example.com/v1/x"))
    assert info.value.reason == "credential_conflict"
    assert len(router.match(normalize_url("https://api.example.com/v2"))) == 1


def test_different_locations_do_not_conflict() -> None:
    router = CredentialRouter([
        _mapping("a", BEARER, ["api.example.com"]),
        _mapping("b", {"type": "query", "name": "authorization"}, ["api.example.com"]),
        _mapping("c", {"type": "header", "name": "X-Key", "prefix": ""}, ["api.example.com"]),
    ])
    assert len(router.match(normalize_url("https://api.example.com/"))) == 3


STAGED = {"tok": SecretValue("t0ken-value-123")}


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        (BEARER, ("header", "Authorization", "Bearer t0ken-value-123")),
        ({"type": "basic", "username": "bot"},
         ("header", "Authorization", "Basic " + base64.b64encode(b"bot:t0ken-value-123").decode())),
        ({"type": "header", "name": "X-Key", "prefix": "Key "}, ("header", "X-Key", "Key t0ken-value-123")),
        ({"type": "header", "name": "X-Key", "prefix": ""}, ("header", "X-Key", "t0ken-value-123")),
        ({"type": "query", "name": "api_key"}, ("query", "api_key", "t0ken-value-123")),
    ],
    ids=["bearer", "basic", "header-prefix", "header-plain", "query"],
)
def test_injection_locations(location: dict, expected: tuple[str, str, str]) -> None:
    router = CredentialRouter([_mapping("tok", location, ["api.example.com"])])
    (item,) = router.inject(router.match(normalize_url("https://api.example.com/")), STAGED)
    assert (item.kind, item.name, item.value) == expected
    assert "t0ken" not in repr(item)


def test_required_missing_secret_fails_closed_optional_skipped() -> None:
    router = CredentialRouter([
        _mapping("opt", {"type": "header", "name": "X-Opt", "prefix": ""}, ["api.example.com"], optional=True),
        _mapping("req", BEARER, ["api.example.com"]),
    ])
    routes = router.match(normalize_url("https://api.example.com/"))
    with pytest.raises(CredentialUnavailable) as info:
        router.inject(routes, {"opt": SecretValue("opt-value-123")})
    assert info.value.details["secret"] == "req"
    assert [i.secret for i in router.inject(routes, {"req": SecretValue("r" * 12)})] == ["req"]


@pytest.mark.parametrize(
    "location",
    [BEARER, {"type": "basic", "username": "bot"}, {"type": "header", "name": "X-Opt", "prefix": ""},
     {"type": "query", "name": "opt_id"}],
    ids=["bearer", "basic", "header", "query"],
)
def test_optional_secret_not_staged_is_skipped_not_failing_the_request(location: dict) -> None:
    router = CredentialRouter([
        _mapping("opt", location, ["api.example.com"], optional=True),
        _mapping("req", {"type": "header", "name": "X-Req", "prefix": ""}, ["api.example.com"]),
    ])
    routes = router.match(normalize_url("https://api.example.com/"))
    assert _secrets(routes) == ["opt", "req"]
    injections = router.inject(routes, {"req": SecretValue("r" * 12)})
    assert [(i.secret, i.name, i.value) for i in injections] == [("req", "X-Req", "r" * 12)]
    both = router.inject(routes, {"opt": SecretValue("o" * 12), "req": SecretValue("r" * 12)})
    assert [i.secret for i in both] == ["opt", "req"]


@pytest.mark.parametrize("value", ["a\r\nX: 1", "a\nb", "\x00abc", "caf\u00e9-secret", "", " padded "])
def test_secret_unfit_for_a_header_is_unavailable(value: str) -> None:
    router = CredentialRouter([_mapping("tok", BEARER, ["api.example.com"])])
    routes = router.match(normalize_url("https://api.example.com/"))
    with pytest.raises(CredentialUnavailable):
        router.inject(routes, {"tok": SecretValue(value)})


def test_apply_injections_appends_query_and_headers() -> None:
    router = CredentialRouter([
        _mapping("q", {"type": "query", "name": "api_key"}, ["api.example.com"]),
        _mapping("h", BEARER, ["api.example.com"]),
    ])
    url = normalize_url("https://api.example.com/v1/x?page=2")
    injections = router.inject(router.match(url), {"q": SecretValue("a b&c=d/é"), "h": SecretValue("hhhhhhhh")})
    sent_url, headers = apply_injections(url, [("Accept", "*/*")], injections)
    assert sent_url == "https://api.example.com/v1/x?page=2&api_key=a%20b%26c%3Dd%2F%C3%A9"
    assert headers == [("Accept", "*/*"), ("Authorization", "Bearer hhhhhhhh")]
    bare = normalize_url("https://api.example.com/v1/x")
    assert apply_injections(bare, [], injections)[0] == "https://api.example.com/v1/x?api_key=a%20b%26c%3Dd%2F%C3%A9"
    assert apply_injections(bare, [], ()) == ("https://api.example.com/v1/x", [])


def test_every_header_credential_is_sent_not_only_the_first() -> None:
    router = CredentialRouter([
        _mapping("tok", BEARER, ["api.example.com"]),
        _mapping("key", {"type": "header", "name": "X-Key", "prefix": ""}, ["api.example.com"]),
        _mapping("team", {"type": "header", "name": "X-Team", "prefix": "T "}, ["api.example.com"]),
        _mapping("app", {"type": "query", "name": "appid"}, ["api.example.com"]),
    ])
    url = normalize_url("https://api.example.com/v1?page=2")
    staged = {name: SecretValue(f"{name}-value-123") for name in ("tok", "key", "team", "app")}
    sent_url, headers = apply_injections(url, [("Accept", "*/*")], router.inject(router.match(url), staged))
    assert headers == [
        ("Accept", "*/*"),
        ("Authorization", "Bearer tok-value-123"),
        ("X-Key", "key-value-123"),
        ("X-Team", "T team-value-123"),
    ]
    assert sent_url == "https://api.example.com/v1?page=2&appid=app-value-123"


@pytest.mark.parametrize(
    ("url", "headers"),
    [
        ("https://api.example.com/?api_key=guest", []),
        ("https://api.example.com/?api%5Fkey=guest", []),
        ("https://api.example.com/?api_key=guest==", []),
        ("https://api.example.com/", [("authorization", "x")]),
    ],
    ids=["query-present", "query-present-encoded", "query-present-equals-in-value", "header-present"],
)
def test_apply_injections_refuses_guest_copy_of_host_location(url: str, headers: list) -> None:
    router = CredentialRouter([
        _mapping("q", {"type": "query", "name": "api_key"}, ["api.example.com"]),
        _mapping("h", BEARER, ["api.example.com"]),
    ])
    target = normalize_url(url)
    injections = router.inject(router.match(target), {"q": SecretValue("qqqqqqqq"), "h": SecretValue("hhhhhhhh")})
    with pytest.raises(EgressDenied) as info:
        apply_injections(target, headers, injections)
    assert info.value.reason == "credential_conflict"


def test_router_uses_only_the_mappings_it_was_built_with() -> None:
    router_b = CredentialRouter([])
    assert router_b.match(normalize_url("https://api.example.com/")) == ()
    assert router_b.inject((), {"tok_a": SecretValue("a" * 12)}) == ()


@pytest.mark.parametrize(
    "mapping",
    [
        {"secret": "x", "location": {"type": "bearer"}, "hosts": ["*.com"], "path_prefixes": ["/"], "optional": False},
        {"secret": "x", "location": {"type": "bearer"}, "hosts": ["a.example"], "path_prefixes": ["v1"], "optional": False},
        {"secret": "x", "location": {"type": "smoke"}, "hosts": ["a.example"], "path_prefixes": ["/"], "optional": False},
    ],
    ids=["wildcard-on-tld", "relative-prefix", "unknown-location"],
)
def test_invalid_mapping_never_widens_scope(mapping: dict) -> None:
    @dataclass(frozen=True)
    class Location:
        type: str

    @dataclass(frozen=True)
    class Loose:  # duck-typed, unvalidated mapping
        secret: str
        location: Location
        hosts: tuple[str, ...]
        path_prefixes: tuple[str, ...]
        optional: bool

    loose = Loose(mapping["secret"], Location(mapping["location"]["type"]), tuple(mapping["hosts"]),
                  tuple(mapping["path_prefixes"]), mapping["optional"])
    with pytest.raises(ValueError):
        CredentialRouter([loose])


def _naive(compiled: list[tuple[str, list, tuple[str, ...]]], url: str) -> set[str]:
    target = normalize_url(url)
    return {
        secret
        for secret, patterns, prefixes in compiled
        if any(p.matches(target) for p in patterns) and any(path_matches(p, target.path) for p in prefixes)
    }


def test_indexed_matching_agrees_with_naive_matching_on_1000_mappings() -> None:
    rng = random.Random(4)
    hosts = ["api.example.com", "*.example.com", "files.example.com", "*.svc.example.com",
             "x.svc.example.com", "http://api.example.com", "api.example.com:8443", "203.0.113.7"]
    prefixes = ["/", "/v1", "/v1/issues", "/v2", "/v1/issues/7", "/a%20b"]
    mappings = [
        _mapping(f"s{i}", {"type": "query", "name": f"k{i}"}, rng.sample(hosts, rng.randint(1, 3)),
                 rng.sample(prefixes, rng.randint(1, 2)))
        for i in range(1000)
    ]
    router = CredentialRouter(mappings)
    compiled = [(m.secret, [parse_host_pattern(h) for h in m.hosts], m.path_prefixes) for m in mappings]
    urls = [
        f"{scheme}://{host}{port}{path}"
        for scheme in ("https", "http")
        for host in ("api.example.com", "www.example.com", "x.svc.example.com", "example.com", "203.0.113.7")
        for port in ("", ":8443")
        for path in ("/", "/v1", "/v1/issues/7/x", "/v10", "/v2/x", "/a%20b/c")
    ]
    for url in urls:
        got = {route.secret for route in router.match(normalize_url(url))}
        assert got == _naive(compiled, url), url
