"""A real componentize-js plugin (built through npm's componentize-js) in the real sandbox.

The JavaScript guest SDK has the Python one's shape: handlers registered by name, HTTP
only through the host's ``http-request`` import, one exception class per ``http-error``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.egress.port import DenyAllEgress, HttpFailure, HttpRequest, HttpResponse
from host.errors import InputInvalid, ToolFailed
from host.runtime import LoadedComponent, Runtime, SandboxLimits, SandboxResult
from sdk.author.build import build_project
from tests.support.plugins import (
    CACHE_DIR,
    REPO_ROOT,
    ScriptedEgress,
    build_test_plugin,
    shared_runtime_config,
)

pytestmark = pytest.mark.slow

LIMITS = SandboxLimits(fuel=2_000_000_000, memory_bytes=256 << 20, timeout_ms=10_000, max_log_bytes=65_536)
URL = "https://api.echo.example/v1/ping?q=1"


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    with Runtime(shared_runtime_config()) as rt:
        yield rt


@pytest.fixture(scope="module")
def plugin(runtime: Runtime) -> LoadedComponent:
    build = build_test_plugin("echo_js")
    return runtime.load(build.module_path.read_bytes(), sha256=build.module_sha256, name="echo_js")


def _run(
    runtime: Runtime, plugin: LoadedComponent, tool: str, value: object, egress: object = None
) -> SandboxResult:
    return runtime.run(
        plugin,
        tool=tool,
        input_json=json.dumps(value),
        limits=LIMITS,
        egress=egress or DenyAllEgress(),
        secret_available=lambda name: False,
    )


def test_js_component_imports_no_wasi_http(runtime: Runtime, plugin: LoadedComponent) -> None:
    imports = list(plugin.component.type.imports(runtime.engine))
    assert imports and not [name for name in imports if name.startswith("wasi:http")]


def test_js_echo_and_fresh_instance_per_call(runtime: Runtime, plugin: LoadedComponent) -> None:
    value = {"message": 'héllo \u2028 "quoted"'}
    assert json.loads(_run(runtime, plugin, "echojs.echo", value).output) == value
    assert [json.loads(_run(runtime, plugin, "echojs.counter", {}).output) for _ in range(3)] == [1, 1, 1]


def test_js_http_round_trip_through_the_egress_port(runtime: Runtime, plugin: LoadedComponent) -> None:
    port = ScriptedEgress(
        HttpResponse(200, (("Content-Type", "text/plain"),), "pong é".encode()),
        HttpResponse(201, (), b"created"),
    )
    result = _run(runtime, plugin, "echojs.fetch", {"url": URL}, port)
    assert json.loads(result.output) == {"status": 200, "body": "pong é", "content_type": "text/plain"}
    assert [(line.level, line.text) for line in result.log] == [("info", "fetched 200 false")]
    posted = _run(runtime, plugin, "echojs.fetch", {"url": URL, "method": "POST", "body": "x"}, port)
    assert json.loads(posted.output) == {"status": 201, "body": "created", "content_type": ""}
    get, post = port.requests
    assert (get.method, get.url, get.headers, get.body, get.timeout_ms) == (
        "GET",
        URL,
        (("Accept", "text/plain"),),
        None,
        5000,
    )
    assert (post.method, json.loads(post.body or b""), post.timeout_ms) == ("POST", {"sent": "x"}, None)
    assert post.headers == (("X-Test", "1"), ("Content-Type", "application/json"))


@pytest.mark.parametrize(
    ("failure", "name"),
    [
        (HttpFailure("denied", "host not allowed"), "HttpDenied"),
        (HttpFailure("too-large"), "TooLarge"),
        (HttpFailure("network", "connection reset"), "NetworkError"),
    ],
    ids=["denied", "too-large", "network"],
)
def test_js_http_failure_reaches_the_guest_as_its_error(
    runtime: Runtime, plugin: LoadedComponent, failure: HttpFailure, name: str
) -> None:
    got = json.loads(_run(runtime, plugin, "echojs.fetch", {"url": URL}, ScriptedEgress(failure)).output)
    assert got == {"error": name, "detail": failure.detail}


@pytest.mark.parametrize(
    ("tool", "value", "error", "fragment"),
    [
        ("echojs.fail", {"how": "input"}, InputInvalid, "the input was wrong"),
        ("echojs.fail", {"how": "tool"}, ToolFailed, "the tool gave up"),
        ("echojs.fail", {"how": "crash"}, ToolFailed, "TypeError: unexpected"),
        ("echojs.fail", {"how": "http"}, ToolFailed, "denied: this call has no network access"),
        ("echojs.fail", {"how": "async"}, ToolFailed, "must be synchronous"),
        ("echojs.missing", {}, InputInvalid, "unknown tool"),
    ],
    ids=[
        "tool-input-error",
        "tool-error",
        "unexpected-exception",
        "uncaught-denial",
        "async-handler",
        "unknown-tool",
    ],
)
def test_js_guest_failures_map_to_codes(
    runtime: Runtime, plugin: LoadedComponent, tool: str, value: object, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        _run(runtime, plugin, tool, value)


def test_js_example_builds_and_runs(runtime: Runtime, tmp_path: Path) -> None:
    built = build_project(REPO_ROOT / "examples" / "js-hello", out_dir=tmp_path, cache_dir=CACHE_DIR)
    example = runtime.load(built.module_path.read_bytes(), sha256=built.module_sha256, name="js-hello")
    assert json.loads(_run(runtime, example, "hello-js.greet", {"name": " Ada "}).output) == {
        "greeting": "Hello, Ada!"
    }
    port = ScriptedEgress(HttpResponse(200, (), b'{"quote": "q", "author": "a"}'))
    assert json.loads(_run(runtime, example, "hello-js.quote", {}, port).output) == {
        "quote": "q",
        "author": "a",
    }
    with pytest.raises(InputInvalid, match="blank"):
        _run(runtime, example, "hello-js.greet", {"name": " "})


class _EchoBody:
    """Answers 200 with the request body reversed (so the direction is visible)."""

    def __init__(self) -> None:
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        return HttpResponse(200, (("Content-Type", "application/octet-stream"),), (request.body or b"")[::-1])


@pytest.mark.parametrize("size", [0, 256, 64 << 10], ids=["empty", "every-byte", "64KiB"])
def test_js_binary_body_round_trip_every_byte_value(runtime: Runtime, plugin: LoadedComponent, size: int) -> None:
    port = _EchoBody()
    result = json.loads(_run(runtime, plugin, "echojs.binary", {"url": URL, "size": size}, port).output)
    sent = bytes(i % 256 for i in range(size))
    [request] = port.requests
    assert (request.method, request.body, request.headers) == (
        "PUT", sent, (("Content-Type", "application/octet-stream"),))
    assert result == {"status": 200, "length": size, "sum": sum(sent), "first": list(sent[::-1][:4])}
