"""The author harness: a real host on scripted HTTP that never shows a secret to the test.

The plugin is the benign ``echo_py`` test plugin (its ``echo.fetch`` tool sends any
request through the host). Its bundle is copied with a manifest that adds one credential
of each location type (the module and its digest are unchanged), a 4 KiB response limit
and a write tool, so every path of the harness runs against real wasm.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from host.audit.log import verify
from host.runtime import ProgressEvent
from sdk.harness import Harness, RecordedRequest, Response, UnscriptedRequest, placeholder, route
from tests.support.plugins import REPO_ROOT, build_test_plugin

pytestmark = pytest.mark.slow

CACHE = REPO_ROOT / ".stockade-cache" / "stockade"
API = "https://api.echo.example/v1"
SECRETS = {
    "bearer_token": "bearer-value-0123456789",
    "basic_pass": "basic-value-0123456789",
    "header_key": "header-value-0123456789",
    "query_key": "query value/+&=0123456789",
}


def _credential(secret: str, location: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {"secret": secret, "location": location, "hosts": ["api.echo.example"],
            "path_prefixes": [prefix], "optional": True}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = build_test_plugin("echo_py")
    target = tmp_path_factory.mktemp("harness-bundle") / "echo"
    shutil.copytree(built.bundle_dir, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["http"]["credentials"] = [
        _credential("bearer_token", {"type": "bearer"}, "/v1/bearer"),
        _credential("basic_pass", {"type": "basic", "username": "bot"}, "/v1/basic"),
        _credential("header_key", {"type": "header", "name": "X-Service-Key", "prefix": "Key "}, "/v1/header"),
        _credential("query_key", {"type": "query", "name": "key"}, "/v1/query"),
    ]
    manifest["http"]["max_response_bytes"] = 4096
    for tool in manifest["tools"]:
        if tool["name"] == "echo.echo":
            tool.update(effect="write", risk="medium")
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


@pytest.fixture(scope="module")
def shared(bundle: Path) -> Iterator[Harness]:
    with Harness(bundle, secrets=SECRETS, cache_dir=CACHE) as harness:
        yield harness


@pytest.fixture
def h(shared: Harness) -> Harness:
    shared.routes.clear()
    shared.reset()
    shared.strict = False
    return shared


def fetch(h: Harness, url: str, **extra: Any) -> dict[str, Any]:
    result = h.call("echo.fetch", {"url": url, **extra})
    assert result.ok, result.error
    return result.output


def assert_no_secret_value(requests: list[RecordedRequest]) -> None:
    text = repr(requests)
    for value in SECRETS.values():
        forms = {value, quote(value, safe=""), base64.b64encode(f"bot:{value}".encode()).decode()}
        for form in forms:
            assert form not in text


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("bearer", lambda r: r.header("authorization") == "Bearer <secret:bearer_token>"),
        ("basic", lambda r: r.basic_auth == ("bot", "<secret:basic_pass>")),
        ("header", lambda r: r.header("x-service-key") == "Key <secret:header_key>"),
        ("query", lambda r: r.query == {"key": "<secret:query_key>"}),
    ],
    ids=["bearer", "basic", "header", "query"],
)
def test_injected_credential_recorded_as_placeholder_never_as_value(h: Harness, path: str, check: Any) -> None:
    fetch(h, f"{API}/{path}/x")
    (sent,) = h.requests
    assert check(sent), sent
    assert_no_secret_value(h.requests)


def test_credential_injected_only_where_its_mapping_matches(h: Harness) -> None:
    fetch(h, f"{API}/elsewhere")
    (sent,) = h.requests
    assert sent.header("authorization") is None and sent.header("x-service-key") is None
    assert sent.query == {}


def test_route_function_sees_placeholders_never_values(h: Harness) -> None:
    seen: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> Response:
        seen.append(request)
        return Response(200, text="ok")

    h.routes[route("GET", f"{API}/bearer/x")] = answer
    assert fetch(h, f"{API}/bearer/x")["body"] == "ok"
    assert seen[0].header("authorization") == placeholder("bearer_token").join(["Bearer ", ""])
    assert_no_secret_value(seen)


def test_server_echoing_a_secret_is_redacted_before_the_guest(h: Harness) -> None:
    leak = f"token={SECRETS['bearer_token']} b64={base64.b64encode(SECRETS['header_key'].encode()).decode()}"
    h.routes[route("GET", f"{API}/bearer/x")] = Response(200, text=leak)
    body = fetch(h, f"{API}/bearer/x")["body"]
    assert SECRETS["bearer_token"] not in body and "[REDACTED]" in body


def test_unscripted_request_answered_404(h: Harness) -> None:
    out = fetch(h, f"{API}/nothing-here")
    assert out["status"] == 404 and "no scripted route" in out["body"]
    assert [r.url for r in h.unmatched] == [f"{API}/nothing-here"]


def test_strict_mode_raises_for_an_unscripted_request(h: Harness) -> None:
    h.strict = True
    with pytest.raises(UnscriptedRequest, match=re.escape(f"GET {API}/nothing-here")):
        h.call("echo.fetch", {"url": f"{API}/nothing-here"})


def test_route_with_query_matched_before_route_without(h: Harness) -> None:
    h.routes[route("GET", f"{API}/items?page=2")] = Response(200, text="page two")
    h.routes[route("GET", f"{API}/items")] = Response(200, text="any page")
    assert fetch(h, f"{API}/items?page=2")["body"] == "page two"
    assert fetch(h, f"{API}/items?page=3")["body"] == "any page"
    assert fetch(h, f"{API}/items")["body"] == "any page"


def test_route_keys_compare_as_urls(h: Harness) -> None:
    h.routes[route("get", f"{API}/a b")] = Response(200, text="spaced")
    assert fetch(h, f"{API}/a%20b")["body"] == "spaced"
    h.routes[("get", "HTTPS://API.ECHO.EXAMPLE:443/v1/raw")] = Response(200, text="raw key")
    assert fetch(h, f"{API}/raw")["body"] == "raw key"


def test_post_body_recorded(h: Harness) -> None:
    h.routes[route("POST", f"{API}/items")] = Response(201, json={"id": 1})
    out = fetch(h, f"{API}/items", method="POST", body="hello")
    assert out["status"] == 201 and out["content_type"] == "application/json"
    (sent,) = h.requests
    assert sent.method == "POST" and sent.json() == {"sent": "hello"} and sent.header("x-test") == "1"


def test_route_function_error_surfaces_from_call(h: Harness) -> None:
    def broken(request: RecordedRequest) -> Response:
        raise LookupError("bug in the test's fake server")

    h.routes[route("GET", f"{API}/x")] = broken
    with pytest.raises(LookupError, match="fake server"):
        h.call("echo.fetch", {"url": f"{API}/x"})
    h.routes[route("GET", f"{API}/x")] = lambda request: "not a Response"  # type: ignore[assignment,return-value]
    with pytest.raises(TypeError, match="must return"):
        h.call("echo.fetch", {"url": f"{API}/x"})


@pytest.mark.parametrize(
    "url",
    ["https://evil.example/v1/x", "http://api.echo.example/v1/x", "https://api.echo.example/v2/x",
     "https://api.echo.example.evil.example/v1/x", "https://127.0.0.1/v1/x"],
    ids=["other-host", "plain-http", "other-path", "suffix-trick", "loopback-ip"],
)
def test_requests_off_the_allowlist_never_reach_the_scripted_network(h: Harness, url: str) -> None:
    out = fetch(h, url)
    assert out["error"] in {"HttpDenied", "InvalidRequest"}, out
    assert h.requests == []


def test_redirect_off_the_allowlist_refused_after_one_request(h: Harness) -> None:
    h.routes[route("GET", f"{API}/bearer/go")] = Response(302, headers={"Location": "https://evil.example/x"})
    out = fetch(h, f"{API}/bearer/go")
    assert out["error"] == "HttpDenied" and "redirect" in out["detail"]
    assert [r.url for r in h.requests] == [f"{API}/bearer/go"]


@pytest.mark.parametrize(
    "headers", [{}, {"Transfer-Encoding": "chunked"}], ids=["content-length", "no-content-length"]
)
def test_response_limit_still_enforced(h: Harness, headers: dict[str, str]) -> None:
    h.routes[route("GET", f"{API}/big")] = Response(200, body=b"x" * 4097, headers=headers)
    assert fetch(h, f"{API}/big")["error"] == "TooLarge"
    h.routes[route("GET", f"{API}/big")] = Response(200, body=b"x" * 4096, headers=headers)
    result = h.call("echo.fetch", {"url": f"{API}/big"})
    assert result.ok and result.output["body"] == "x" * 4096
    assert result.usage.bytes_received == 4096  # counted as the host read it


def test_set_cookie_dropped_before_the_guest(h: Harness) -> None:
    h.routes[route("GET", f"{API}/c")] = Response(200, text="ok", headers={"Set-Cookie": "s=1"})
    assert fetch(h, f"{API}/c")["body"] == "ok"


def test_write_tool_needs_approval_and_is_audited(h: Harness) -> None:
    refused = h.call("echo.echo", {"message": "hi"})
    assert refused.error is not None and refused.error.code == "APPROVAL_REQUIRED"
    approved = h.call("echo.echo", {"message": "hi"}, approve=True)
    assert approved.ok and approved.output == {"message": "hi"}
    records = h.audit_records()
    assert records[0]["kind"] == "lock.accepted"
    kinds = [(r["kind"], r.get("tool"), r.get("ok")) for r in records]
    assert kinds[-2:] == [("call.intent", "echo.echo", None), ("call.outcome", "echo.echo", True)]
    report = verify(h.audit_path, expected_head=approved.audit_id)
    assert report.ok, report.reason


def test_approve_does_not_bypass_input_validation(h: Harness) -> None:
    result = h.call("echo.echo", {"message": 5}, approve=True)
    assert result.error is not None and result.error.code == "INPUT_INVALID"


def test_unknown_tool_and_wrong_version_refused(h: Harness) -> None:
    result = h.call("echo.nope", {})
    assert result.error is not None and result.error.code == "TOOL_NOT_FOUND"
    result = h.call("echo.echo", {"message": "hi"}, version="9.9.9")
    assert result.error is not None and result.error.code == "TOOL_NOT_FOUND"


def test_calls_run_as_the_documented_principal(h: Harness) -> None:
    assert h.principal.project == "test" and h.principal.subject == "author"
    assert h.tools == ["echo.binary", "echo.counter", "echo.echo", "echo.fail", "echo.fetch", "echo.log"]
    assert h.call("echo.log", {"secret": "bearer_token"}).output is True
    assert h.call("echo.log", {"secret": "never_stored"}).output is False


def test_private_address_refused_by_dns_vetting(bundle: Path) -> None:
    with Harness(bundle, address="10.0.0.1", cache_dir=CACHE) as private:
        out = private.call("echo.fetch", {"url": f"{API}/x"}).output
        assert out["error"] == "HttpDenied"
        assert private.requests == []


def test_compiled_artifact_shared_between_harnesses(bundle: Path) -> None:
    events: list[ProgressEvent] = []
    with Harness(bundle, cache_dir=CACHE):
        pass
    with Harness(bundle, cache_dir=CACHE, compile_progress=events.append):
        pass
    assert [e.stage for e in events] == ["cached"]
    key = CACHE / "artifacts" / "artifact.key"  # the per-user cache, shared with dev/inspect/call
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32


def test_project_directory_built_then_loaded() -> None:
    with Harness(REPO_ROOT / "tests" / "plugins" / "echo_py", cache_dir=CACHE) as built:
        assert built.call("echo.counter", {}).output == 1
        assert built.bundle.manifest.package.name == "echo"


def test_workspace_removed_on_close_and_on_failure(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with Harness(bundle, cache_dir=CACHE) as harness:
        assert [p.name.startswith("stockade-harness-") for p in tmp_path.iterdir()] == [True]
        harness.close()  # idempotent with the with-block's close
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="neither"):
        Harness(tmp_path, cache_dir=CACHE)
    with pytest.raises(ValueError, match="at least 8"):
        Harness(bundle, secrets={"bearer_token": "short"}, cache_dir=CACHE)
    assert list(tmp_path.iterdir()) == []


def test_random_secret_values_differ_per_harness(bundle: Path) -> None:
    seen = []
    for _ in range(2):
        with Harness(bundle, secrets=["bearer_token"], cache_dir=CACHE) as harness:
            harness.routes[route("GET", f"{API}/bearer/x")] = Response(200, text="ok")
            harness.call("echo.fetch", {"url": f"{API}/bearer/x"})
            seen.append(harness.requests[0].header("authorization"))
            seen.append(harness.host._secrets.get("test", "author", "bearer_token").reveal())  # type: ignore[union-attr]
    assert seen[0] == seen[2] == "Bearer <secret:bearer_token>"
    assert seen[1] != seen[3] and len(seen[1]) >= 24


@pytest.mark.parametrize(
    ("kwargs", "body", "content_type"),
    [
        ({"json": {"a": [1]}}, b'{"a": [1]}', "application/json"),
        ({"text": "hé"}, "hé".encode(), "text/plain; charset=utf-8"),
        ({"body": b"\x00\x01"}, b"\x00\x01", None),
        ({"json": None}, b"null", "application/json"),
    ],
    ids=["json", "text", "bytes", "json-null"],
)
def test_response_bodies(kwargs: dict[str, Any], body: bytes, content_type: str | None) -> None:
    response = Response(200, **kwargs)
    assert response.body == body
    assert dict(response.headers).get("Content-Type") == content_type


def test_response_refuses_two_bodies() -> None:
    with pytest.raises(TypeError, match="one of"):
        Response(200, json={}, text="x")


def test_response_keeps_an_explicit_content_type() -> None:
    response = Response(200, json=[], headers={"Content-Type": "application/problem+json"})
    assert response.headers == (("Content-Type", "application/problem+json"),)


def test_workspace_given_to_the_harness_is_read_only_at_its_guest_path(tmp_path: Path) -> None:
    build = build_test_plugin("reader_py")
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "guide.md").write_text("# Guide\n")
    with Harness(build.bundle_dir, cache_dir=CACHE, workspace=ws) as harness:
        assert harness.call("reader.read", {"path": "/workspace/docs/guide.md"}).output == {
            "ok": True, "text": "# Guide\n",
        }
        planted = harness.call("reader.change", {"action": "create", "path": "/workspace/docs/x"})
        assert planted.output["ok"] is False and not (ws / "docs" / "x").exists()
    with Harness(build.bundle_dir, cache_dir=CACHE) as harness:  # no workspace: nothing to read
        assert harness.call("reader.read", {"path": "/workspace/docs/guide.md"}).output["ok"] is False
