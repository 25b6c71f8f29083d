"""Response sanitation (docs/design.md §8 step 9): what the guest gets back never holds a secret.

A server (hostile, or merely chatty) echoes the credential it received, raw, URL-encoded
in upper- and lower-case hex, with ``+`` for space, in base64 and as basic-auth base64.
The guest gets ``[REDACTED]`` instead, in headers and body; cookies and credential-like
response headers are dropped; cookies are never replayed.
"""

from __future__ import annotations

import base64
import gzip
import re
from collections.abc import Iterator
from urllib.parse import quote, quote_plus

import pytest

from host.egress.port import HttpFailure, HttpResponse
from tests.support.egress_session import FakeResolver, allow, bearer, get, make_session, mapping
from tests.support.servers import Exchange, LoopbackServer, ServerSet, echo, respond

API = "api.tracker.example"
SECRET = "s3cr3t/v@lue+with space=ok"


def _forms(value: str, username: str = "bot") -> dict[str, str]:
    return {
        "raw": value,
        "url-upper": quote(value, safe=""),
        "url-lower-hex": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(value, safe="")),
        "url-plus": quote_plus(value, safe=""),
        "base64": base64.b64encode(value.encode()).decode(),
        "base64-url": base64.urlsafe_b64encode(value.encode()).decode(),
        "basic": base64.b64encode(f"{username}:{value}".encode()).decode(),
    }


FORMS = _forms(SECRET)


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


def _resolver() -> FakeResolver:
    return FakeResolver({API: ["127.0.0.1"]})


def _echo_everything(ex: Exchange) -> None:
    """Echo every form of the credential the server received, in headers and body."""
    auth = ex.request.header("X-Tracker-Key") or ""
    forms = _forms(auth)
    body = "\n".join(f"{name}: {value}" for name, value in forms.items()).encode()
    headers = [(f"X-Echo-{name}", value) for name, value in forms.items()]
    ex.respond(200, body, headers)


def test_secret_echoed_in_body_and_headers_is_redacted(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": _echo_everything})
    creds = [mapping("tok", {"type": "header", "name": "X-Tracker-Key", "prefix": ""},
                     [f"http://{API}:{api.port}"])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"tok": SECRET},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert api.requests[0].header("X-Tracker-Key") == SECRET  # the server really got it
    text = result.body.decode()
    headers = dict(result.headers)
    for name, form in FORMS.items():
        if name == "basic":
            continue  # a header mapping: the redactor knows no basic username for it
        assert form not in text, name
        assert f"{name}: [REDACTED]" in text, name
        assert headers[f"x-echo-{name}"] == "[REDACTED]", name


def test_basic_auth_echo_is_redacted(servers: ServerSet) -> None:
    def echo_auth(ex: Exchange) -> None:
        ex.respond(200, f"you sent {ex.request.header('Authorization')}".encode(),
                   [("X-You-Sent", ex.request.header("Authorization") or "")])

    api = servers.new(routes={"/v1/echo": echo_auth})
    creds = [mapping("tok", {"type": "basic", "username": "bot"}, [f"http://{API}:{api.port}"])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"tok": SECRET},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert FORMS["basic"] not in result.body.decode()
    assert result.body == b"you sent Basic [REDACTED]"
    assert dict(result.headers)["x-you-sent"] == "Basic [REDACTED]"


def test_secret_in_response_header_name_is_redacted(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": respond(200, b"ok", [(f"X-{'abcdefgh1234'}", "1")])})
    with make_session(allow=[allow(API, api.port)], staged={"tok": "abcdefgh1234"},
                      credentials=[bearer("tok", [f"http://{API}:{api.port}"])],
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert all("abcdefgh1234" not in name for name, _ in result.headers)


@pytest.mark.parametrize(
    "header",
    ["Set-Cookie", "Set-Cookie2", "WWW-Authenticate", "X-Auth-Token", "X-Session-Token",
     "Proxy-Authenticate", "X-Upstream-Secret", "Authorization"],
)
def test_cookie_and_credential_like_response_headers_dropped(servers: ServerSet, header: str) -> None:
    api = servers.new(routes={"/v1/echo": respond(200, b"ok", [(header, "value-1"), ("X-Fine", "yes")])})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    names = {name.lower() for name, _ in result.headers}
    assert header.lower() not in names
    assert "x-fine" in names


def test_cookies_set_by_server_are_never_replayed(servers: ServerSet) -> None:
    api = servers.new()
    api.route("/v1/login", respond(200, b"ok", [("Set-Cookie", "sid=abc; Path=/")]))
    api.route("/v1/echo", echo())
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        session.send(get(api.url("/v1/login", host=API)))
        session.send(get(api.url("/v1/echo", host=API)))
    assert "cookie" not in api.requests[1].header_names()


def test_failure_detail_is_redacted(servers: ServerSet) -> None:
    # A redirect whose Location embeds the secret: the refusal text must not echo it.
    api = servers.new(routes={"/v1/go": respond(302, b"", [("Location", f"http://evil.example/{SECRET}")])})
    creds = [bearer("tok", [f"http://{API}:{api.port}"])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"tok": SECRET},
                      resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/go", host=API)))
    assert isinstance(result, HttpFailure)
    for form in FORMS.values():
        assert form not in result.detail


def test_usage_records_hold_no_query_and_no_secret(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": echo()})
    creds = [mapping("tok", {"type": "query", "name": "tracker_id"}, [f"http://{API}:{api.port}"])]
    with make_session(allow=[allow(API, api.port)], credentials=creds, staged={"tok": SECRET},
                      resolver=_resolver()) as session:
        session.send(get(api.url("/v1/./x/../echo?page=secret-page-value", host=API)))
    (record,) = session.usage.requests
    assert (record.method, record.host, record.path, record.status) == ("GET", API, "/v1/echo", 200)
    assert "secret-page-value" not in repr(session.usage)
    assert all(form not in repr(session.usage) for form in FORMS.values())
    assert record.bytes_received > 0 and record.outcome == "ok"


def test_server_reply_without_secrets_is_unchanged(servers: ServerSet) -> None:
    api: LoopbackServer = servers.new(routes={"/v1/echo": respond(200, b"plain body", [("X-A", "b")])})
    with make_session(allow=[allow(API, api.port)], credentials=[bearer("tok", [f"http://{API}:{api.port}"])],
                      staged={"tok": SECRET}, resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert result.body == b"plain body"
    assert ("x-a", "b") in result.headers


def test_secret_inside_unrequested_gzip_body_is_decoded_and_redacted(servers: ServerSet) -> None:
    # The host asks for identity; a server that compresses anyway must not smuggle the
    # secret past redaction inside gzip.
    body = gzip.compress(f"token was {SECRET}".encode())
    api = servers.new(routes={"/v1/echo": respond(200, body, [("Content-Encoding", "gzip")])})
    with make_session(allow=[allow(API, api.port)], credentials=[bearer("tok", [f"http://{API}:{api.port}"])],
                      staged={"tok": SECRET}, resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpResponse)
    assert result.body == b"token was [REDACTED]"
    assert "content-encoding" not in {name for name, _ in result.headers}
    assert api.requests[0].header("Accept-Encoding") == "identity"


def test_undecodable_content_encoding_refused(servers: ServerSet) -> None:
    api = servers.new(routes={"/v1/echo": respond(200, b"\x1b\x00opaque", [("Content-Encoding", "br")])})
    with make_session(allow=[allow(API, api.port)], resolver=_resolver()) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "network"
