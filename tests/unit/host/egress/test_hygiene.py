"""Request/response hygiene rules, table-driven (docs/design.md §8 steps 2 and 9)."""

from __future__ import annotations

import pytest

from host.egress.hygiene import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    check_method,
    check_query,
    check_request_headers,
    fold_header_name,
    is_credential_header_name,
    is_credential_query_name,
    sanitize_response_headers,
)
from host.errors import EgressDenied

CREDENTIAL_HEADERS = [
    "Authorization", "AUTHORIZATION", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key",
    "X-Auth-Token", "X-Token", "X-Access-Token", "X-Session-Token", "X-Csrf-Token", "X-Secret",
    "X-Api-Secret", "X-Refresh-Token", "My-Password", "X-Client-Credential", "X-Amz-Security-Token",
    "Authentication", "X_API_KEY", "X-Apikey", "X-Goog-Api-Key", "X-Private-Key", "Private-Token",
    "X-Hub-Signature", "X-Session-Id", "Set-Cookie",
]
HOST_OWNED_HEADERS = [
    "Host", "host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "TE",
    "Trailer", "Upgrade", "Expect", "Proxy-Connection", "Proxy-Anything", "X-Forwarded-For",
    "Forwarded",
]
ORDINARY_HEADERS = [
    ("Accept", "application/json"), ("Content-Type", "application/json; charset=utf-8"),
    ("User-Agent", "plugin/1.0"), ("If-None-Match", '"abc"'), ("X-Request-Id", "42"),
    ("Accept-Language", "fr-CH, fr;q=0.9"), ("X-Empty", ""), ("X-Tab", "a\tb"),
]


@pytest.mark.parametrize("name", CREDENTIAL_HEADERS)
def test_credential_header_refused(name: str) -> None:
    assert is_credential_header_name(name)
    with pytest.raises(EgressDenied) as info:
        check_request_headers([(name, "x")])
    assert info.value.reason in {"credential_header", "forbidden_header"}


@pytest.mark.parametrize("name", HOST_OWNED_HEADERS)
def test_host_owned_header_refused(name: str) -> None:
    with pytest.raises(EgressDenied) as info:
        check_request_headers([(name, "x")])
    assert info.value.reason == "forbidden_header"


@pytest.mark.parametrize(("name", "value"), ORDINARY_HEADERS, ids=lambda v: str(v)[:20])
def test_ordinary_header_allowed(name: str, value: str) -> None:
    check_request_headers([(name, value)])


def test_auth_substring_rule_is_deliberately_broad() -> None:
    # DESIGN: any header name containing "auth" is refused, even X-Author.
    with pytest.raises(EgressDenied, match="credential"):
        check_request_headers([("X-Author", "bob")])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-A", "line\r\nInjected: 1"), ("X-A", "lf\n"), ("X-A", "cr\r"), ("X-A", "nul\x00"),
        ("X-A", "esc\x1b[0m"), ("X-A", "del\x7f"), ("X-A", " leading"), ("X-A", "trailing "),
        ("X-A", "caf\u00e9"), ("X-A", "\u2028"), ("X-A\r\nB", "v"), ("X A", "v"), ("X-A:", "v"),
        ("", "v"), ("X-\u00c4", "v"), ("X-A\x00", "v"), ("x" * 257, "v"), ("X-A", "v" * 8193),
    ],
    ids=["crlf", "lf", "cr", "nul", "esc", "del", "leading-space", "trailing-space", "latin1",
         "unicode-line-separator", "crlf-in-name", "space-in-name", "colon-in-name", "empty-name",
         "non-ascii-name", "nul-in-name", "name-too-long", "value-too-long"],
)
def test_malformed_header_is_invalid(name: str, value: str) -> None:
    with pytest.raises(EgressDenied) as info:
        check_request_headers([(name, value)])
    assert info.value.reason == "invalid_header"


def test_header_count_limit() -> None:
    check_request_headers([(f"X-{i}", "v") for i in range(MAX_HEADERS)])
    with pytest.raises(EgressDenied, match="headers"):
        check_request_headers([(f"X-{i}", "v") for i in range(MAX_HEADERS + 1)])


def test_header_total_bytes_limit() -> None:
    value = "v" * 4000
    count = MAX_HEADER_BYTES // (4000 + 3)
    check_request_headers([(f"X-{i:02d}", value) for i in range(count)])
    with pytest.raises(EgressDenied, match="bytes"):
        check_request_headers([(f"X-{i:02d}", value) for i in range(count + 1)])


@pytest.mark.parametrize(
    "name",
    ["api_key", "apikey", "API-KEY", "access_token", "token", "key", "secret", "password", "passwd",
     "client_secret", "signature", "sig", "auth", "X-Amz-Signature", "X-Amz-Credential",
     "X-Amz-Security-Token", "api%5Fkey", "api%5fkey", "access%2Dtoken", "refresh_token", "id_token",
     "session", "sessionid", "jwt", "private_key", "aws_access_key_id", "authorization", "pwd"],
)
def test_credential_query_name_refused(name: str) -> None:
    assert is_credential_query_name(name)
    with pytest.raises(EgressDenied) as info:
        check_query(f"a=1&{name}=x")
    assert info.value.reason == "credential_query"


@pytest.mark.parametrize(
    "query",
    ["", "page=2", "author=bob", "q=token", "sort=keyword&order=asc", "keys_only=1", "state=open",
     "a", "a=&b="],
    ids=lambda q: q or "empty",
)
def test_ordinary_query_allowed(query: str) -> None:
    check_query(query)


@pytest.mark.parametrize("query", ["a=1;token=x", "token", "&&api_key", "x=1&Token=y"])
def test_query_separators_and_bare_names(query: str) -> None:
    with pytest.raises(EgressDenied):
        check_query(query)


@pytest.mark.parametrize(
    "query", ["sig=abc==", "key=a=b", "page=2&sig=abc==", "auth=x=y", "a=1;key=a=b"]
)
def test_query_name_ends_at_first_equals_sig_abc_padding_refused(query: str) -> None:
    # The name is everything before the FIRST '=': a base64 value ending in '==' or a
    # value holding '=' must not make the name 'sig=abc=' or 'key=a'.
    with pytest.raises(EgressDenied, match="looks like a credential") as info:
        check_query(query)
    assert info.value.reason == "credential_query"


@pytest.mark.parametrize(
    "method", ["GET", "POST", "PATCH", "PROPFIND"], ids=str
)
def test_method_token_accepted(method: str) -> None:
    assert check_method(method) == method


@pytest.mark.parametrize(
    "method", ["", "GE T", "GET\r\n", "G\x00", "GÉT", "X" * 17, "GET/"],
    ids=["empty", "space", "crlf", "nul", "non-ascii", "too-long", "slash"],
)
def test_malformed_method_refused(method: str) -> None:
    with pytest.raises(EgressDenied) as info:
        check_method(method)
    assert info.value.reason == "invalid_method"


def test_response_headers_sanitized() -> None:
    headers = [
        ("Content-Type", "text/plain"), ("Set-Cookie", "a=1"), ("set-cookie2", "b=2"),
        ("WWW-Authenticate", "Bearer"), ("X-Auth-Token", "t"), ("Content-Length", "10"),
        ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked"), ("Connection", "close"),
        ("Proxy-Authenticate", "Basic"), ("X-RateLimit-Remaining", "10"), ("ETag", '"x"'),
    ]
    kept = sanitize_response_headers(headers)
    assert kept == [("Content-Type", "text/plain"), ("X-RateLimit-Remaining", "10"), ("ETag", '"x"')]


# -- issue 9.4: re-routing headers and underscore spellings, compared after folding ----------

REROUTING_TABLE = [
    ("X-HTTP-Method-Override", "forbidden_header"), ("X-HTTP-Method", "forbidden_header"),
    ("X-Method-Override", "forbidden_header"), ("X-Original-URL", "forbidden_header"),
    ("X-Rewrite-URL", "forbidden_header"), ("Forwarded", "forbidden_header"),
    ("X-Forwarded-For", "forbidden_header"), ("X-Forwarded-Host", "forbidden_header"),
    ("X-Forwarded-Anything", "forbidden_header"), ("X-Real-IP", "forbidden_header"),
    ("X_Forwarded_For", "forbidden_header"), ("X_Real_Ip", "forbidden_header"),
    ("x_http_method_override", "forbidden_header"), ("Content_Length", "forbidden_header"),
    ("Transfer_Encoding", "forbidden_header"), ("HOST", "forbidden_header"),
    ("Proxy_Authorization", "forbidden_header"), ("X_Api_Key", "credential_header"),
    ("Set_Cookie", "credential_header"), ("X-Request-Id", None), ("X-Forwarding", None),
    ("X-Realm", None), ("X-Http-Status-Wanted", None),
]


@pytest.mark.parametrize(("name", "reason"), REROUTING_TABLE, ids=[n for n, _ in REROUTING_TABLE])
def test_rerouting_and_underscore_spellings_table(name: str, reason: str | None) -> None:
    if reason is None:
        check_request_headers([(name, "v")])
        return
    with pytest.raises(EgressDenied) as info:
        check_request_headers([(name, "v")])
    assert info.value.reason == reason


def test_fold_header_name() -> None:
    assert fold_header_name("X_Forwarded_For") == fold_header_name("x-forwarded-for") == "x-forwarded-for"


def test_underscore_spelling_of_dropped_response_header_is_dropped() -> None:
    kept = sanitize_response_headers([("Set_Cookie", "a=1"), ("Content_Encoding", "gzip"), ("X-Ok", "1")])
    assert kept == [("X-Ok", "1")]
