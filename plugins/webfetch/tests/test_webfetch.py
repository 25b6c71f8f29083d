"""webfetch through the author harness: allowlisted docs hosts only, bounded, text out.

Run with ``stockade test plugins/webfetch`` (or pytest on this directory).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.harness import Harness, Response, route

PROJECT = Path(__file__).resolve().parents[1]
PAGE = "https://docs.python.org/3/library/json.html"
HTML = """<!doctype html><html><head><title>json &mdash; JSON encoder</title>
<style>body { color: red }</style><script>var secret = "not text";</script></head>
<body><nav>Navigation</nav><h1>json</h1><p>Encode   and
decode <b>JSON</b> &amp; more.</p><ul><li>dumps</li><li>loads</li></ul></body></html>"""


@pytest.fixture(scope="module")
def shared() -> Iterator[Harness]:
    with Harness(PROJECT) as harness:
        yield harness


@pytest.fixture
def h(shared: Harness) -> Harness:
    shared.routes.clear()
    shared.reset()
    return shared


def test_html_page_reduced_to_text(h: Harness) -> None:
    html = Response(200, body=HTML.encode(), headers={"Content-Type": "text/html; charset=utf-8"})
    h.routes[route("GET", PAGE)] = html
    result = h.call("webfetch.fetch", {"url": PAGE})
    assert result.ok, result.error
    out = result.output
    assert out["url"] == PAGE and out["status"] == 200 and out["content_type"].startswith("text/html")
    assert out["text"].startswith("json — JSON encoder\n\n")
    assert "Encode and decode JSON & more." in out["text"]
    assert "dumps\n" in out["text"] and "var secret" not in out["text"] and "color" not in out["text"]
    (sent,) = h.requests
    assert sent.method == "GET" and sent.header("authorization") is None


def test_plain_text_returned_as_is(h: Harness) -> None:
    h.routes[route("GET", "https://developer.mozilla.org/robots.txt")] = Response(200, text="User-agent: *\n")
    result = h.call("webfetch.fetch", {"url": "https://developer.mozilla.org/robots.txt"})
    assert result.ok, result.error
    assert result.output["text"] == "User-agent: *\n"


def test_text_cut_to_max_chars(h: Harness) -> None:
    h.routes[route("GET", PAGE)] = Response(200, text="x" * 5000)
    result = h.call("webfetch.fetch", {"url": PAGE, "max_chars": 10})
    assert result.ok, result.error
    assert result.output["text"] == "x" * 10


def test_default_max_chars_is_20000(h: Harness) -> None:
    h.routes[route("GET", PAGE)] = Response(200, text="y" * 30_000)
    result = h.call("webfetch.fetch", {"url": PAGE})
    assert result.ok, result.error
    assert len(result.output["text"]) == 20_000


@pytest.mark.parametrize(
    "payload",
    [{"url": PAGE, "max_chars": 0}, {"url": PAGE, "max_chars": 50_001}, {"url": "https://" + "a" * 1993},
     {"url": PAGE, "method": "POST"}],
    ids=["max-chars-zero", "max-chars-over-limit", "url-too-long", "unknown-field"],
)
def test_inputs_outside_the_schema_refused(h: Harness, payload: dict[str, object]) -> None:
    result = h.call("webfetch.fetch", payload)
    assert result.error is not None and result.error.code == "INPUT_INVALID"
    assert h.requests == []


def test_plain_http_refused(h: Harness) -> None:
    result = h.call("webfetch.fetch", {"url": "http://docs.python.org/3/"})
    assert result.error is not None and result.error.code == "INPUT_INVALID"
    assert h.requests == []


def test_readthedocs_subdomain_allowed(h: Harness) -> None:
    url = "https://pip.readthedocs.io/en/stable/"
    h.routes[route("GET", url)] = Response(200, text="pip docs")
    result = h.call("webfetch.fetch", {"url": url})
    assert result.ok, result.error


@pytest.mark.parametrize(
    "url",
    ["https://evil.example/", "https://readthedocs.io/", "https://a.b.readthedocs.io/",
     "https://docs.python.org.evil.example/", "https://user@docs.python.org/3/", "https://10.0.0.1/"],
    ids=["other-host", "wildcard-apex", "two-labels-deep", "suffix-trick", "userinfo", "private-ip"],
)
def test_hosts_off_the_allowlist_refused_without_a_request(h: Harness, url: str) -> None:
    result = h.call("webfetch.fetch", {"url": url})
    # The host refused the request, so the failure is reported as that refusal.
    assert result.error is not None and result.error.code == "EGRESS_DENIED"
    assert "refused by the host" in result.error.message
    assert h.requests == []


def test_redirect_from_allowed_docs_host_to_forbidden_host_refused(h: Harness) -> None:
    h.routes[route("GET", PAGE)] = Response(302, headers={"Location": "https://evil.example/collect"})
    result = h.call("webfetch.fetch", {"url": PAGE})
    assert result.error is not None and result.error.code == "EGRESS_DENIED"
    assert "redirect" in result.error.message
    assert [r.url for r in h.requests] == [PAGE]  # evil.example never saw a request


def test_redirect_within_allowed_hosts_followed(h: Harness) -> None:
    moved = "https://docs.python.org/3/library/json.html#moved"
    old = "https://docs.python.org/3/library/simplejson.html"
    h.routes[route("GET", old)] = Response(301, headers={"Location": moved})
    h.routes[route("GET", PAGE)] = Response(200, text="here")
    result = h.call("webfetch.fetch", {"url": old})
    assert result.ok, result.error
    assert result.output["text"] == "here"
    assert [r.url for r in h.requests] == [old, PAGE]  # the fragment is never sent


def test_response_over_1_mib_refused(h: Harness) -> None:
    h.routes[route("GET", PAGE)] = Response(200, text="z" * (1024 * 1024 + 1))
    result = h.call("webfetch.fetch", {"url": PAGE})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "1 MiB" in result.error.message


def test_response_of_1_mib_html_is_parsed(h: Harness) -> None:
    chunk = "<p>Some <a href='#'>documentation</a> text &amp; more.</p>\n"
    page = "<html><body>" + chunk * ((1024 * 1024 - 100) // len(chunk)) + "</body></html>"
    h.routes[route("GET", PAGE)] = Response(200, text=page, headers={"Content-Type": "text/html"})
    result = h.call("webfetch.fetch", {"url": PAGE, "max_chars": 50_000})
    assert result.ok, result.error
    assert result.output["text"].startswith("Some documentation text & more.")
    assert len(result.output["text"]) == 50_000


def test_markup_dense_page_parsed_only_as_far_as_the_text_returned(h: Harness) -> None:
    # 1 MiB of "<i>a</i>" is ~130k tag pairs; parsing stops once max_chars are in hand.
    page = "<html><body>" + "<i>a</i>" * (1024 * 1024 // 8 - 10) + "</body></html>"
    h.routes[route("GET", PAGE)] = Response(200, text=page, headers={"Content-Type": "text/html"})
    result = h.call("webfetch.fetch", {"url": PAGE})
    assert result.ok, result.error
    assert result.output["text"] == "a" * 20_000


def test_costliest_page_stays_well_inside_the_fuel_limit(h: Harness) -> None:
    # All 50000 characters of 1 MiB of "<i>a</i>": ~400 KB of tags parsed in the guest.
    page = "<html><body>" + "<i>a</i>" * (1024 * 1024 // 8 - 10) + "</body></html>"
    h.routes[route("GET", PAGE)] = Response(200, text=page, headers={"Content-Type": "text/html"})
    result = h.call("webfetch.fetch", {"url": PAGE, "max_chars": 50_000})
    assert result.ok, result.error
    assert result.output["text"] == "a" * 50_000
    fuel_limit = h.bundle.manifest.limits.fuel
    assert result.usage.fuel < fuel_limit * 0.7, (result.usage.fuel, fuel_limit)


def test_binary_content_refused(h: Harness) -> None:
    h.routes[route("GET", PAGE)] = Response(200, body=b"\x89PNG\r\n", headers={"Content-Type": "image/png"})
    result = h.call("webfetch.fetch", {"url": PAGE})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "not a text document" in result.error.message


def test_error_status_returned_with_its_page(h: Harness) -> None:
    result = h.call("webfetch.fetch", {"url": "https://docs.python.org/3/nope.html"})
    assert result.ok, result.error
    assert result.output["status"] == 404  # the harness answers unscripted routes with 404


def test_set_cookie_from_the_server_never_reaches_the_tool(h: Harness) -> None:
    h.routes[route("GET", PAGE)] = Response(200, text="ok", headers={"Set-Cookie": "session=abc"})
    assert h.call("webfetch.fetch", {"url": PAGE}).ok
    h.routes[route("GET", PAGE)] = Response(200, text="again")
    assert h.call("webfetch.fetch", {"url": PAGE}).ok
    assert all(r.header("cookie") is None for r in h.requests)
