"""Real componentize-py plugins in the real sandbox: the guest SDK's contract and containment.

Plugins come from ``tests/plugins`` (built once, cached across sessions). Each call runs in
a fresh instance; the guest reaches the network only through the egress port, which here
is scripted.
"""

from __future__ import annotations

import json
import socket
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

# The suite's compiler (Winch): these tests are about the guest SDK and containment, not the
# compiler; the hostile plugin's limits under Cranelift are in test_python_plugin_limits.py.
pytestmark = pytest.mark.slow

LIMITS = SandboxLimits(fuel=2_000_000_000, memory_bytes=256 << 20, timeout_ms=10_000, max_log_bytes=65_536)
MiB = 1 << 20
URL = "https://api.echo.example/v1/blob"


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    with Runtime(shared_runtime_config()) as rt:
        yield rt


@pytest.fixture(scope="module")
def plugins(runtime: Runtime) -> dict[str, LoadedComponent]:
    names = ("echo_py", "hostile_py", "sockets_py")
    builds = [build_test_plugin(n) for n in names]
    items = [(n, b.module_path.read_bytes(), b.module_sha256) for n, b in zip(names, builds, strict=True)]
    return dict(zip(names, runtime.load_many(items), strict=True))


def _run(
    runtime: Runtime,
    component: LoadedComponent,
    tool: str,
    value: object,
    *,
    egress: object = None,
    limits: SandboxLimits = LIMITS,
    secrets: frozenset[str] = frozenset(),
) -> SandboxResult:
    return runtime.run(
        component,
        tool=tool,
        input_json=json.dumps(value),
        limits=limits,
        egress=egress or DenyAllEgress(),
        secret_available=lambda name: name in secrets,
    )


def _output(result: SandboxResult) -> object:
    return json.loads(result.output)


def _assert_no_connection(srv: socket.socket) -> None:
    with pytest.raises(TimeoutError):
        srv.accept()


def test_echo_round_trip(runtime: Runtime, plugins: dict[str, LoadedComponent]) -> None:
    value = {"message": 'héllo \u2028 "quoted"'}
    assert _output(_run(runtime, plugins["echo_py"], "echo.echo", value)) == value


def test_module_state_never_survives_a_call(runtime: Runtime, plugins: dict[str, LoadedComponent]) -> None:
    counts = [_output(_run(runtime, plugins["echo_py"], "echo.counter", {})) for _ in range(3)]
    assert counts == [1, 1, 1]


def test_guest_cannot_read_write_or_list_files(runtime: Runtime, plugins: dict[str, LoadedComponent]) -> None:
    attempts = _output(_run(runtime, plugins["hostile_py"], "hostile.files", {}))
    assert isinstance(attempts, dict) and len(attempts) == 5
    assert {name: a["ok"] for name, a in attempts.items()} == dict.fromkeys(attempts, False), attempts


def test_guest_sees_no_environment_or_arguments(
    runtime: Runtime, plugins: dict[str, LoadedComponent]
) -> None:
    seen = _output(_run(runtime, plugins["hostile_py"], "hostile.env", {}))
    assert (seen["environ"], seen["argv"]) == ({}, [])


def test_stdlib_socket_cannot_reach_a_loopback_listener(
    runtime: Runtime, plugins: dict[str, LoadedComponent], listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    seen = _output(_run(runtime, plugins["hostile_py"], "hostile.socket", {"port": port}))
    assert (seen["connect"]["ok"], seen["resolve"]["ok"]) == (False, False), seen
    _assert_no_connection(listener)


def test_wasi_sockets_tcp_connect_is_denied(
    runtime: Runtime, plugins: dict[str, LoadedComponent], listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    seen = _output(_run(runtime, plugins["sockets_py"], "sockets.connect", {"port": port}))
    assert "connected" not in seen
    assert set(seen.values()) == {"ACCESS_DENIED"}, seen
    _assert_no_connection(listener)
    resolved = _output(_run(runtime, plugins["sockets_py"], "sockets.resolve", {"name": "localhost"}))
    assert "address" not in resolved, resolved


def test_ten_megabytes_of_stdout_capped_in_the_log(
    runtime: Runtime, plugins: dict[str, LoadedComponent]
) -> None:
    limits = SandboxLimits(
        fuel=LIMITS.fuel, memory_bytes=LIMITS.memory_bytes, timeout_ms=10_000, max_log_bytes=4096
    )
    result = _run(runtime, plugins["hostile_py"], "hostile.flood", {"bytes": 10 * MiB}, limits=limits)
    assert _output(result) == 10 * MiB
    assert result.usage.log_truncated and result.usage.log_bytes <= 4096
    assert sum(len(line.text.encode()) for line in result.log if line.source != "host") <= 4096


def test_http_round_trip_through_the_egress_port(
    runtime: Runtime, plugins: dict[str, LoadedComponent]
) -> None:
    port = ScriptedEgress(
        HttpResponse(200, (("Content-Type", "text/plain"),), b"pong \xc3\xa9"),
        HttpResponse(201, (), b"created"),
    )
    url = "https://api.echo.example/v1/ping?q=1"
    got = _output(_run(runtime, plugins["echo_py"], "echo.fetch", {"url": url}, egress=port))
    assert got == {"status": 200, "body": "pong é", "content_type": "text/plain"}
    got = _output(
        _run(
            runtime,
            plugins["echo_py"],
            "echo.fetch",
            {"url": url, "method": "POST", "body": "x"},
            egress=port,
        )
    )
    assert got == {"status": 201, "body": "created", "content_type": ""}
    get, post = port.requests
    assert (get.method, get.url, get.headers, get.body, get.timeout_ms) == (
        "GET",
        url,
        (("Accept", "text/plain"),),
        None,
        5000,
    )
    assert (post.method, json.loads(post.body or b""), post.timeout_ms) == ("POST", {"sent": "x"}, None)
    assert post.headers == (("X-Test", "1"), ("Content-Type", "application/json"))


FAILURES = [
    (HttpFailure("denied", "host not allowed"), "HttpDenied", "host not allowed"),
    (HttpFailure("credential-unavailable", "tracker_token"), "CredentialUnavailable", "tracker_token"),
    (HttpFailure("invalid-request", "bad header"), "InvalidRequest", "bad header"),
    (HttpFailure("too-large"), "TooLarge", ""),
    (HttpFailure("timeout"), "HttpTimeout", ""),
    (HttpFailure("budget-exhausted"), "BudgetExhausted", ""),
    (HttpFailure("network", "connection reset"), "NetworkError", "connection reset"),
]


@pytest.mark.parametrize(("failure", "name", "detail"), FAILURES, ids=[f[0].kind for f in FAILURES])
def test_each_http_failure_reaches_the_guest_as_its_exception(
    runtime: Runtime, plugins: dict[str, LoadedComponent], failure: HttpFailure, name: str, detail: str
) -> None:
    port = ScriptedEgress(failure)
    got = _output(
        _run(runtime, plugins["echo_py"], "echo.fetch", {"url": "https://api.echo.example/v1"}, egress=port)
    )
    assert got == {"error": name, "detail": detail}


def test_uncaught_denial_fails_the_tool_with_its_name(
    runtime: Runtime, plugins: dict[str, LoadedComponent]
) -> None:
    with pytest.raises(ToolFailed, match="HttpDenied: denied: this call has no network access"):
        _run(runtime, plugins["echo_py"], "echo.fail", {"how": "http"})


@pytest.mark.parametrize(
    ("tool", "value", "error", "fragment"),
    [
        ("echo.fail", {"how": "input"}, InputInvalid, "the input was wrong"),
        ("echo.fail", {"how": "tool"}, ToolFailed, "the tool gave up"),
        ("echo.fail", {"how": "crash"}, ToolFailed, "KeyError: 'unexpected'"),
        ("echo.fail", {"how": "output"}, ToolFailed, "TypeError"),
        ("echo.missing", {}, InputInvalid, "unknown tool"),
    ],
    ids=["tool-input-error", "tool-error", "unexpected-exception", "unserializable-output", "unknown-tool"],
)
def test_guest_failures_map_to_codes_and_instance_survives(
    runtime: Runtime,
    plugins: dict[str, LoadedComponent],
    tool: str,
    value: object,
    error: type[Exception],
    fragment: str,
) -> None:
    with pytest.raises(error, match=fragment):
        _run(runtime, plugins["echo_py"], tool, value)


def test_log_levels_and_secret_availability(runtime: Runtime, plugins: dict[str, LoadedComponent]) -> None:
    result = _run(
        runtime,
        plugins["echo_py"],
        "echo.log",
        {"secret": "tracker_token"},
        secrets=frozenset({"tracker_token"}),
    )
    assert _output(result) is True
    assert [(line.source, line.level, line.text) for line in result.log] == [
        ("log", "debug", "debug line"),
        ("log", "info", "info 1"),
        ("log", "warn", "warn"),
        ("log", "error", "error %s %s 'missing-arg'"),
    ]
    assert _output(_run(runtime, plugins["echo_py"], "echo.log", {"secret": "tracker_token"})) is False


def test_python_example_builds_and_runs(runtime: Runtime, tmp_path: Path) -> None:
    built = build_project(REPO_ROOT / "examples" / "python-hello", out_dir=tmp_path, cache_dir=CACHE_DIR)
    example = runtime.load(built.module_path.read_bytes(), sha256=built.module_sha256, name="python-hello")
    assert _output(_run(runtime, example, "hello.greet", {"name": " Ada "})) == {"greeting": "Hello, Ada!"}
    port = ScriptedEgress(HttpResponse(200, (), b'{"quote": "q", "author": "a"}'))
    assert _output(_run(runtime, example, "hello.quote", {}, egress=port)) == {"quote": "q", "author": "a"}
    assert port.requests[0].url == "https://quotes.example/v1/quotes/today"
    with pytest.raises(InputInvalid, match="blank"):
        _run(runtime, example, "hello.greet", {"name": " "})


class _EchoBody:
    """Answers 200 with the request body reversed (so the direction is visible)."""

    def __init__(self) -> None:
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        return HttpResponse(200, (("Content-Type", "application/octet-stream"),), (request.body or b"")[::-1])


@pytest.mark.parametrize("size", [0, 256, 3 * MiB], ids=["empty", "every-byte", "3MiB"])
def test_binary_body_round_trip_every_byte_value(
    runtime: Runtime, plugins: dict[str, LoadedComponent], size: int
) -> None:
    # 1.0.0 trapped past ~3 MiB ("fuel allocated for hostcalls has been exhausted").
    port = _EchoBody()
    result = _output(_run(runtime, plugins["echo_py"], "echo.binary", {"url": URL, "size": size}, egress=port))
    sent = bytes(i % 256 for i in range(size))
    [request] = port.requests
    assert (request.method, request.body, request.headers) == (
        "PUT", sent, (("Content-Type", "application/octet-stream"),))
    assert result == {"status": 200, "length": size, "sum": sum(sent), "first": list(sent[::-1][:4])}
