"""URL normalization and host/path patterns (docs/design.md §8 "URL and address rules")."""

from __future__ import annotations

from typing import get_args

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.egress.urls import (
    MAX_URL_CHARS,
    DenyReason,
    HostPattern,
    NormalizedUrl,
    make_host_pattern,
    normalize_path_prefix,
    normalize_url,
    parse_host_pattern,
    path_matches,
)
from host.errors import EgressDenied
from tests.unit.host.egress.url_corpus import ACCEPTED, REFUSED


def _ids(cases: list[tuple[str, ...]]) -> list[str]:
    return [case[0] for case in cases]


def test_url_corpus_is_large_and_ids_unique() -> None:
    ids = _ids(ACCEPTED) + _ids(REFUSED)  # type: ignore[arg-type]
    assert len(ids) >= 60
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("case_id", "url", "sent", "kind"), ACCEPTED, ids=_ids(ACCEPTED))
def test_url_accepted_and_normalized(case_id: str, url: str, sent: str, kind: str) -> None:
    normalized = normalize_url(url)
    assert normalized.url() == sent
    assert normalized.host_kind == kind


@pytest.mark.parametrize(("case_id", "url", "reason"), REFUSED, ids=_ids(REFUSED))
def test_url_refused_with_reason(case_id: str, url: str, reason: str) -> None:
    with pytest.raises(EgressDenied) as caught:
        normalize_url(url)
    assert caught.value.reason == reason
    assert caught.value.code == "EGRESS_DENIED"
    assert caught.value.details["reason"] == reason


@pytest.mark.parametrize(("case_id", "url", "sent", "kind"), ACCEPTED, ids=_ids(ACCEPTED))
def test_checked_url_is_exactly_what_httpx_sends(case_id: str, url: str, sent: str, kind: str) -> None:
    # What the allowlist checked must be what goes on the wire: httpx2 must not
    # re-encode, re-resolve dot segments or re-map the host of a normalized URL.
    assert str(httpx2.URL(sent)) == sent


@pytest.mark.parametrize(("case_id", "url", "sent", "kind"), ACCEPTED, ids=_ids(ACCEPTED))
def test_normalization_is_idempotent(case_id: str, url: str, sent: str, kind: str) -> None:
    assert normalize_url(sent) == normalize_url(url)


def test_normalized_fields() -> None:
    url = normalize_url("HTTPS://Bücher.Example.:8443/a/./b/%2e%2e/c?q=1#top")
    assert url == NormalizedUrl(
        scheme="https",
        host="xn--bcher-kva.example",
        port=8443,
        path="/a/c",
        query="q=1",
        host_kind="dns",
    )
    assert url.authority() == "xn--bcher-kva.example:8443"
    assert normalize_url("http://a.example/").port == 80
    assert normalize_url("https://[::1]/").host == "::1"


def test_url_over_length_limit_refused() -> None:
    base = "https://a.example/"
    at_limit = base + "a" * (MAX_URL_CHARS - len(base))
    assert normalize_url(at_limit).path == "/" + "a" * (MAX_URL_CHARS - len(base))
    with pytest.raises(EgressDenied, match="longer than") as caught:
        normalize_url(at_limit + "a")
    assert caught.value.reason == "invalid_url"


def test_non_string_url_refused() -> None:
    with pytest.raises(EgressDenied) as caught:
        normalize_url(b"https://a.example/")  # type: ignore[arg-type]
    assert caught.value.reason == "invalid_url"


def test_error_message_bounds_hostile_input() -> None:
    with pytest.raises(EgressDenied) as caught:
        normalize_url("https://a.example/" + "%zz" * 2000)
    assert len(caught.value.message) < 300


_URL_PIECES = st.sampled_from(
    [
        "https://", "http://", "a.example", "A.EXAMPLE", ".", "..", "/", "%2e", "%2E", "%2f",
        "%5c", "%", "%c3%a9", "%41", "@", ":", ":443", ":0", "?", "#", ";", "[", "]", "::1",
        "127.0.0.1", "0x7f", "localhost", "bücher", "．", "\\", " ", "\t", "é", "|", "~", "xn--",
        "-", "1", "*",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(_URL_PIECES, max_size=12).map("".join))
def test_normalize_url_only_raises_egress_denied_and_reaches_a_fixpoint(url: str) -> None:
    try:
        normalized = normalize_url(url)
    except EgressDenied:
        return
    sent = normalized.url()
    assert normalize_url(sent) == normalized
    assert str(httpx2.URL(sent)) == sent
    assert "/./" not in normalized.path + "/" and "/../" not in normalized.path + "/"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_normalize_url_arbitrary_text_never_crashes(text: str) -> None:
    # Only EgressDenied with a documented reason may escape; what is accepted is a fixed
    # point (normalizing the URL that is sent gives the same URL).
    for candidate in (text, "https://" + text, "https://a.example/" + text):
        try:
            normalized = normalize_url(candidate)
        except EgressDenied as denied:
            assert denied.code == "EGRESS_DENIED"
            assert denied.reason in get_args(DenyReason)
            continue
        assert normalize_url(normalized.url()) == normalized
        assert normalized.scheme in ("http", "https") and normalized.path.startswith("/")


# --- host patterns ---------------------------------------------------------------

PATTERNS_OK: list[tuple[str, str, HostPattern]] = [
    ("literal", "api.example.com", HostPattern("https", "api.example.com", 443, False)),
    ("http-scheme", "http://api.example.com", HostPattern("http", "api.example.com", 80, False)),
    ("explicit-port", "https://api.example.com:8443", HostPattern("https", "api.example.com", 8443, False)),
    ("wildcard", "*.example.com", HostPattern("https", "example.com", 443, True)),
    ("wildcard-idna", "*.Bücher.example", HostPattern("https", "xn--bcher-kva.example", 443, True)),
    ("case-and-trailing-dot", "API.Example.com.", HostPattern("https", "api.example.com", 443, False)),
    ("ipv4", "93.184.216.34", HostPattern("https", "93.184.216.34", 443, False)),
    ("ipv6-bracketed", "[2606:4700:0::1111]:8443", HostPattern("https", "2606:4700::1111", 8443, False)),
    # Without a public-suffix list a two-label suffix is the best we can check.
    ("wildcard-two-label-suffix", "*.co.uk", HostPattern("https", "co.uk", 443, True)),
]


@pytest.mark.parametrize(("case_id", "text", "expected"), PATTERNS_OK, ids=_ids(PATTERNS_OK))  # type: ignore[arg-type]
def test_host_pattern_parsed(case_id: str, text: str, expected: HostPattern) -> None:
    assert parse_host_pattern(text) == expected


def test_host_pattern_default_scheme() -> None:
    assert parse_host_pattern("a.example", default_scheme="http") == HostPattern("http", "a.example", 80, False)
    with pytest.raises(ValueError, match="default scheme"):
        parse_host_pattern("a.example", default_scheme="ftp")


PATTERNS_BAD: list[tuple[str, str, str]] = [
    ("star-alone", "*", r"'\*'"),
    ("star-dot", "*.", "empty host"),
    ("wildcard-tld", "*.com", "at least two labels"),
    ("star-in-middle", "a.*.com", r"'\*'"),
    ("double-star", "**.example.com", r"'\*'"),
    ("star-prefix-glued", "*a.example.com", r"'\*'"),
    ("two-wildcards", "*.*.example.com", r"'\*'"),
    ("wildcard-ip", "*.1.2.3.4", "never matches IP"),
    ("wildcard-ipv6", "*.[::1]", "IP"),
    ("userinfo", "user@api.example.com", "userinfo"),
    ("path", "https://api.example.com/v1", "no path"),
    ("query", "api.example.com?x", "no path"),
    ("fragment", "api.example.com#x", "no path"),
    ("percent", "api%2eexample.com", "'%'"),
    ("empty-label", "a..example.com", "empty label"),
    ("ipv4-short", "127.1", "canonical"),
    ("ipv4-hex", "0x7f.0.0.1", "canonical"),
    ("localhost", "localhost", "by name"),
    ("wildcard-localhost", "*.localhost", "by name"),
    ("sub-localhost", "x.localhost", "by name"),
    ("ftp-scheme", "ftp://a.example", "http or https"),
    ("uppercase-scheme", "HTTPS://a.example", "http or https"),
    ("port-zero", "https://a.example:0", "1–65535"),
    ("port-empty", "https://a.example:", "1–5 digits"),
    ("ipv6-unbracketed", "::1", "brackets"),
    ("empty", "", "non-empty"),
    ("space", " a.example", "space"),
    ("backslash", "a.example\\", "backslash"),
    ("control", "a.example\n", "control"),
]


@pytest.mark.parametrize(("case_id", "text", "message"), PATTERNS_BAD, ids=_ids(PATTERNS_BAD))
def test_bad_host_pattern_refused_never_widened(case_id: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_host_pattern(text)


MATCHES: list[tuple[str, str, str, bool]] = [
    ("wildcard-one-label", "*.example.com", "https://api.example.com/", True),
    ("wildcard-one-letter-label", "*.example.com", "https://a.example.com/", True),
    ("wildcard-never-apex", "*.example.com", "https://example.com/", False),
    ("wildcard-not-two-labels", "*.example.com", "https://a.b.example.com/", False),
    ("wildcard-label-boundary", "*.example.com", "https://aexample.com/", False),
    ("wildcard-needs-its-dot", "*.example.com", "https://evilexample.com/", False),
    ("wildcard-needs-its-dot-hyphen", "*.example.com", "https://evil-example.com/", False),
    ("wildcard-suffix-attack", "*.example.com", "https://api.example.com.evil.example/", False),
    ("wildcard-scheme-differs", "*.example.com", "http://api.example.com/", False),
    ("wildcard-port-differs", "*.example.com", "https://api.example.com:8443/", False),
    ("wildcard-trailing-dot-url", "*.example.com", "https://api.example.com./", True),
    ("wildcard-idna", "*.bücher.example", "https://www.xn--bcher-kva.example/", True),
    ("wildcard-never-ipv4", "*.example.com", "https://93.184.216.34/", False),
    ("literal-normalized-url", "api.example.com", "https://API.EXAMPLE.COM./x", True),
    ("literal-default-port-explicit", "api.example.com", "https://api.example.com:443/", True),
    ("literal-prefix-label", "api.example.com", "https://xapi.example.com/", False),
    ("literal-subdomain", "api.example.com", "https://x.api.example.com/", False),
    ("literal-explicit-port", "https://api.example.com:8443", "https://api.example.com:8443/", True),
    ("literal-port-missing", "https://api.example.com:8443", "https://api.example.com/", False),
    ("ip-same", "93.184.216.34", "https://93.184.216.34/", True),
    ("ip-other", "93.184.216.34", "https://93.184.216.35/", False),
    ("ipv6-same-other-spelling", "[2606:4700::1111]", "https://[2606:4700:0:0::1111]/", True),
    ("ipv6-not-mapped-ipv4", "93.184.216.34", "https://[::ffff:93.184.216.34]/", False),
    ("http-pattern", "http://legacy.example", "http://legacy.example/", True),
    ("http-pattern-https-url", "http://legacy.example", "https://legacy.example/", False),
]


@pytest.mark.parametrize(("case_id", "pattern", "url", "expected"), MATCHES, ids=_ids(MATCHES))  # type: ignore[arg-type]
def test_host_pattern_matching(case_id: str, pattern: str, url: str, expected: bool) -> None:
    assert parse_host_pattern(pattern).matches(normalize_url(url)) is expected


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("https", "EXAMPLE.com", 443, False), "normalized"),
        (("https", "0.0.1", 443, True), "canonical"),
        (("https", "example.com", 0, False), "1–65535"),
        (("https", "example.com", True, False), "1–65535"),
        (("ftp", "example.com", 21, False), "http or https"),
        (("https", "com", 443, True), "two labels"),
        (("https", "localhost", 443, False), "by name"),
        (("https", "[::1]", 443, False), "IPv6"),
    ],
    ids=["unnormalized-host", "wildcard-ip-suffix", "port-zero", "port-bool", "ftp", "wildcard-tld", "localhost",
         "ipv6-bracketed-field"],
)  # fmt: skip
def test_host_pattern_cannot_be_constructed_invalid(fields: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HostPattern(*fields)  # type: ignore[arg-type]


def test_host_pattern_str() -> None:
    assert str(parse_host_pattern("*.example.com")) == "https://*.example.com:443"
    assert str(parse_host_pattern("http://[::1]:8080")) == "http://[::1]:8080"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("https", "api.example", None), HostPattern("https", "api.example", 443, False)),
        (("http", "api.example", None), HostPattern("http", "api.example", 80, False)),
        (("https", "*.example.com", 8443), HostPattern("https", "example.com", 8443, True)),
        (("https", "[2606:4700::1111]", None), HostPattern("https", "2606:4700::1111", 443, False)),
        (("https", "Bücher.example.", None), HostPattern("https", "xn--bcher-kva.example", 443, False)),
    ],
    ids=["default-https", "default-http", "wildcard-port", "ipv6", "idna"],
)
def test_make_host_pattern(args: tuple[str, str, int | None], expected: HostPattern) -> None:
    assert make_host_pattern(*args) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("HTTPS", "api.example", None), "http or https"),
        (("ftp", "api.example", None), "http or https"),
        (("https", "api.example:8443", None), "port"),
        (("https", "https://api.example", None), "bare host"),
        (("https", "api.example/v1", None), "bare host"),
        (("https", "u@api.example", None), "bare host"),
        (("https", "::1", None), "brackets"),
        (("https", "", None), "non-empty"),
        (("https", "api.example", 0), "1–65535"),
        (("https", "api.example", 65536), "1–65535"),
        (("https", "api.example", True), "1–65535"),
        (("https", "api.example", "443"), "1–65535"),
        (("https", "*.com", None), "two labels"),
        (("https", "localhost", None), "by name"),
        (("https", "2130706433", None), "canonical"),
    ],
    ids=["uppercase-scheme", "ftp", "port-in-host", "scheme-in-host", "path-in-host", "userinfo",
         "ipv6-unbracketed", "empty-host", "port-0", "port-65536", "port-bool", "port-string", "wildcard-tld",
         "localhost", "ipv4-integer"],
)  # fmt: skip
def test_make_host_pattern_refuses_bad_allow_entry(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_host_pattern(*args)  # type: ignore[arg-type]


COVERS: list[tuple[str, str, str, bool]] = [
    ("literal-same", "api.example.com", "api.example.com", True),
    ("literal-other", "api.example.com", "www.example.com", False),
    ("wildcard-covers-one-label", "*.example.com", "api.example.com", True),
    ("wildcard-not-apex", "*.example.com", "example.com", False),
    ("wildcard-not-deeper", "*.example.com", "a.b.example.com", False),
    ("wildcard-covers-same-wildcard", "*.example.com", "*.example.com", True),
    ("literal-does-not-cover-wildcard", "api.example.com", "*.example.com", False),
    ("wildcard-not-wider-wildcard", "*.api.example.com", "*.example.com", False),
    ("scheme-differs", "https://api.example.com", "http://api.example.com", False),
    ("port-differs", "api.example.com", "api.example.com:8443", False),
]


@pytest.mark.parametrize(("case_id", "outer", "inner", "expected"), COVERS, ids=_ids(COVERS))  # type: ignore[arg-type]
def test_host_pattern_covers(case_id: str, outer: str, inner: str, expected: bool) -> None:
    assert parse_host_pattern(outer).covers(parse_host_pattern(inner)) is expected


# --- path prefixes -------------------------------------------------------------

@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("/", "/"),
        ("/v1", "/v1"),
        ("/v1/", "/v1"),
        ("/v1/issues", "/v1/issues"),
        ("/%7Euser", "/~user"),
        ("/a%2a", "/a%2A"),
        ("/caf%C3%A9", "/caf%C3%A9"),
    ],
    ids=["root", "plain", "trailing-slash-stripped", "two-segments", "unreserved-decoded", "escape-uppercased",
         "utf8"],
)  # fmt: skip
def test_normalize_path_prefix(prefix: str, expected: str) -> None:
    assert normalize_path_prefix(prefix) == expected


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("", "starting with '/'"),
        ("v1", "starting with '/'"),
        ("/v1?x=1", "no query"),
        ("/v1#x", "no query"),
        ("/v1/../admin", "dot segments"),
        ("/v1/./x", "dot segments"),
        ("/v1/%2e%2e", "dot segments"),
        ("/v1/..;", "';'"),
        ("/v1%2fx", "'/'"),
        ("/v1%5cx", "'/'"),
        ("/v1//x", "empty segments"),
        ("//", "empty segments"),
        ("/v1/%zz", "valid escape"),
        ("/v1 x", "space"),
        ("/v1\\x", "backslash"),
        ("/v1/\x00", "control"),
        ("/caf%ff", "UTF-8"),
        ("/" + "a" * MAX_URL_CHARS, "at most"),
    ],
    ids=["empty", "relative", "query", "fragment", "dotdot", "dot", "encoded-dotdot", "dotdot-semicolon",
         "encoded-slash", "encoded-backslash", "empty-segment", "double-slash", "bad-escape", "space", "backslash",
         "control", "bad-utf8", "too-long"],
)  # fmt: skip
def test_bad_path_prefix_refused(prefix: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        normalize_path_prefix(prefix)


PATHS: list[tuple[str, str, str, bool]] = [
    ("exact", "/v1", "/v1", True),
    ("below", "/v1", "/v1/x", True),
    ("trailing-slash", "/v1", "/v1/", True),
    ("sibling-with-same-start", "/v1", "/v10", False),
    ("glued-suffix", "/v1", "/v1x", False),
    ("root-prefix-matches-all", "/", "/anything/at/all", True),
    ("root-path-not-under-v1", "/v1", "/", False),
    ("case-sensitive", "/v1", "/V1", False),
    ("deep", "/v1/issues", "/v1/issues/7/comments", True),
    ("deep-glued", "/v1/issues", "/v1/issuesX", False),
]


@pytest.mark.parametrize(("case_id", "prefix", "path", "expected"), PATHS, ids=_ids(PATHS))  # type: ignore[arg-type]
def test_path_prefix_matches_at_segment_boundary(case_id: str, prefix: str, path: str, expected: bool) -> None:
    assert path_matches(prefix, path) is expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://a.example/v1/../v2", False),
        ("https://a.example/v1/%2e%2e/v2", False),
        ("https://a.example/v1/./x", True),
        ("https://a.example/v2/../v1/x", True),
        ("https://a.example/v10", False),
        ("https://a.example/v1?q=/v2", True),
        ("https://a.example/%76%31/x", True),
    ],
    ids=["dotdot-escapes", "encoded-dotdot-escapes", "dot-stays", "dotdot-returns-in", "v10", "query-ignored",
         "unreserved-escapes-decoded"],
)  # fmt: skip
def test_path_prefix_judged_after_normalization(url: str, expected: bool) -> None:
    assert path_matches(normalize_path_prefix("/v1"), normalize_url(url).path) is expected
