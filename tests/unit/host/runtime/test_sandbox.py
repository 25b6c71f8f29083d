"""Per-call behaviour: output, fresh instances, host imports, tool errors, usage."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime
from wasmtime import component as wc

from host.config import HostConfig
from host.egress.port import FailureKind, HttpFailure, HttpRequest, HttpResponse
from host.errors import InputInvalid, SandboxMemory, SandboxTrap, ToolFailed
from host.runtime import LogLine, Runtime
from tests.support import wat


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("state")))
    yield runtime
    runtime.close()


class RecordingEgress:
    """Records requests; answers with a fixed outcome."""

    def __init__(self, outcome: HttpResponse | HttpFailure | object) -> None:
        self.outcome = outcome
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        self.requests.append(request)
        return self.outcome  # type: ignore[return-value]


class RaisingEgress:
    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        raise RuntimeError("egress internals: api key sk-live-123")


@pytest.mark.parametrize(
    "text",
    ["", "hello", '{"a":[1,2,{"b":null}]}', "ünïcödé ✓ 🦀", "x" * 65536],
    ids=["empty", "ascii", "json", "unicode", "64KiB"],
)
def test_echo_returns_input(rt: Runtime, text: str) -> None:
    result = wat.run_module(rt, wat.echo_component(), input_json=text)
    assert result.output == text
    assert result.log == ()


def test_usage_reports_fuel_and_wall_time(rt: Runtime) -> None:
    usage = wat.run_module(rt, wat.counter_component()).usage
    assert usage.fuel_consumed > 0
    assert usage.wall_ms > 0
    assert (usage.log_bytes, usage.log_truncated) == (0, False)


def test_fresh_instance_per_call(rt: Runtime) -> None:
    assert [wat.run_module(rt, wat.counter_component()).output for _ in range(3)] == ["1", "1", "1"]


def test_wasmtime_runs_post_return_inside_call() -> None:
    # The assumption host.runtime.sandbox documents: wasmtime 50's Func.__call__ runs
    # cabi_post_return itself, so a second call on one instance works and sees it.
    engine = wasmtime.Engine()
    component = wc.Component(engine, wat.post_return_counter_component())
    store = wasmtime.Store(engine)
    func = wc.Linker(engine).instantiate(store, component).get_func(store, "call")
    assert func is not None
    assert [func(store, "t", "x"), func(store, "t", "x")] == ["0", "1"]


def test_post_return_component_runs_per_call(rt: Runtime) -> None:
    assert wat.run_module(rt, wat.post_return_counter_component()).output == "0"
    assert wat.run_module(rt, wat.post_return_counter_component()).output == "0"


def test_log_levels_captured(rt: Runtime) -> None:
    result = wat.run_module(rt, wat.logging_component())
    assert result.output == "logged"
    assert result.log == (
        LogLine("log", "debug", "debug line"),
        LogLine("log", "info", "info line"),
        LogLine("log", "warn", "warn line"),
        LogLine("log", "error", "error line"),
    )
    assert result.usage.log_bytes == sum(len(line.text) for line in result.log)


@pytest.mark.parametrize(("stream", "level"), [("stdout", "info"), ("stderr", "warn")])
def test_wasi_output_captured_as_lines(rt: Runtime, stream: str, level: str) -> None:
    result = wat.run_module(rt, wat.stream_component("one\ntwo\npartial", stream=stream))
    assert [(ln.source, ln.level, ln.text) for ln in result.log] == [
        (stream, level, "one"), (stream, level, "two"), (stream, level, "partial")
    ]
    assert result.usage.log_bytes == len("one\ntwo\npartial")


def test_wasi_grants_no_environment_and_no_arguments(rt: Runtime) -> None:
    assert wat.run_module(rt, wat.environment_component()).output == "env=0,args=0"


@pytest.mark.parametrize(("staged", "expected"), [({"tok"}, "true"), (set(), "false")], ids=["staged", "absent"])
def test_secret_available_asks_the_callback(rt: Runtime, staged: set[str], expected: str) -> None:
    asked: list[str] = []

    def available(name: str) -> bool:
        asked.append(name)
        return name in staged

    assert wat.run_module(rt, wat.secret_component(), input_json="tok", secret_available=available).output == expected
    assert asked == ["tok"]


def test_secret_available_is_strictly_boolean(rt: Runtime) -> None:
    # A callback returning a truthy non-bool (say, the secret itself) answers false.
    result = wat.run_module(rt, wat.secret_component(), input_json="tok", secret_available=lambda n: "s3cr3t")  # type: ignore[arg-type,return-value]
    assert result.output == "false"


def test_http_request_with_deny_all_gets_denied(rt: Runtime) -> None:
    result = wat.run_module(rt, wat.http_component(), input_json="https://api.example/v1")
    assert result.output == "err:0:this call has no network access"


def test_http_request_converted_exactly(rt: Runtime) -> None:
    egress = RecordingEgress(HttpResponse(201, (("content-type", "text/plain"),), b"pong"))
    result = wat.run_module(rt, wat.http_component(), input_json="https://api.example/v1?q=1", egress=egress)
    assert result.output == "ok:201:pong"
    assert egress.requests == [
        HttpRequest(method="POST", url="https://api.example/v1?q=1", headers=(("x-test", "1"),),
                    body=b"body", timeout_ms=1234)
    ]


@pytest.mark.parametrize(
    ("kind", "index", "detail"),
    [
        ("denied", 0, "host not allowed"),
        ("credential-unavailable", 1, "tracker_token"),
        ("invalid-request", 2, "bad header"),
        ("too-large", 3, ""),
        ("timeout", 4, ""),
        ("budget-exhausted", 5, ""),
        ("network", 6, "connection reset"),
    ],
)
def test_http_failure_kinds_reach_the_guest(rt: Runtime, kind: FailureKind, index: int, detail: str) -> None:
    egress = RecordingEgress(HttpFailure(kind, detail or "ignored for payload-less cases"))
    result = wat.run_module(rt, wat.http_component(), input_json="https://x/", egress=egress)
    assert result.output == f"err:{index}:{detail}"


def test_unencodable_egress_text_sanitized(rt: Runtime) -> None:
    egress = RecordingEgress(HttpFailure("network", "bad \udcff byte"))
    result = wat.run_module(rt, wat.http_component(), input_json="https://x/", egress=egress)
    assert result.output == "err:6:bad ? byte"
    egress = RecordingEgress(HttpResponse(200, (("x-h", "\ud800"),), b"ok"))
    assert wat.run_module(rt, wat.http_component(), input_json="https://x/", egress=egress).output == "ok:200:ok"


@pytest.mark.parametrize(
    "outcome",
    [
        "not a response",
        HttpResponse(70000, (), b""),
        HttpResponse(200, ((b"k", "v"),), b""),  # type: ignore[arg-type]
        HttpFailure("exploded"),  # type: ignore[arg-type]
    ],
    ids=["wrong-type", "status-over-u16", "bytes-header", "unknown-kind"],
)
def test_malformed_egress_outcome_becomes_trap(rt: Runtime, outcome: object) -> None:
    with pytest.raises(SandboxTrap, match="host import `http-request` failed") as info:
        wat.run_module(rt, wat.http_component(), input_json="https://x/", egress=RecordingEgress(outcome))
    assert isinstance(info.value.__cause__, TypeError)
    assert wat.run_module(rt, wat.echo_component(), input_json="fine").output == "fine"


def test_host_import_exception_becomes_safe_trap(rt: Runtime) -> None:
    with pytest.raises(SandboxTrap, match="host import `http-request` failed") as info:
        wat.run_module(rt, wat.http_component(), input_json="https://x/", egress=RaisingEgress())
    assert "sk-live-123" not in info.value.message
    assert "sk-live-123" not in info.value.details["trap"]
    assert isinstance(info.value.__cause__, RuntimeError)  # kept for the host's own logs


def test_secret_callback_exception_becomes_trap(rt: Runtime) -> None:
    def broken(name: str) -> bool:
        raise KeyError(name)

    with pytest.raises(SandboxTrap, match="host import `secret-available` failed"):
        wat.run_module(rt, wat.secret_component(), input_json="tok", secret_available=broken)


def test_keyboard_interrupt_in_host_import_propagates(rt: Runtime) -> None:
    def interrupted(name: str) -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        wat.run_module(rt, wat.secret_component(), input_json="tok", secret_available=interrupted)


@pytest.mark.parametrize(("tag", "error", "code"), [(0, InputInvalid, "INPUT_INVALID"), (1, ToolFailed, "TOOL_FAILED")])
def test_tool_error_maps_to_code(rt: Runtime, tag: int, error: type[Exception], code: str) -> None:
    with pytest.raises(error) as info:
        wat.run_module(rt, wat.tool_error_component(tag), input_json="no such repo")
    assert info.value.code == code  # type: ignore[attr-defined]
    assert "no such repo" in info.value.message  # type: ignore[attr-defined]
    assert info.value.details["usage"]["fuel_consumed"] > 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("message", "code"),
    [("out of memory (MemoryError)", "SANDBOX_MEMORY"), ("out of memory (MemoryError)!", "TOOL_FAILED"),
     ("MemoryError", "TOOL_FAILED")],
    ids=["sdk-oom-text", "near-miss", "bare-word"],
)
def test_guest_sdk_out_of_memory_answer_is_sandbox_memory(rt: Runtime, message: str, code: str) -> None:
    """The Python SDK catches MemoryError and answers ``failed`` with one exact text."""
    with pytest.raises((ToolFailed, SandboxMemory)) as info:
        wat.run_module(rt, wat.tool_error_component(1), input_json=message)
    assert info.value.code == code


def test_same_module_compiled_once(tmp_path: Path) -> None:
    with Runtime(HostConfig(state_dir=tmp_path)) as runtime:
        first = runtime.load(wat.echo_component(), sha256=wat.sha256(wat.echo_component()), name="a")
        second = runtime.load(wat.echo_component(), sha256=wat.sha256(wat.echo_component()), name="b")
        stats = runtime.stats()
    assert (stats.compiled, stats.memory_hits) == (1, 1)
    assert first.component is second.component
    assert (first.name, second.name) == ("a", "b")


def test_failed_call_does_not_keep_its_store_alive(rt: Runtime) -> None:
    # An error the caller keeps (audit, retries) must not pin the guest's memory.
    gc.collect()
    before = sum(isinstance(o, wasmtime.Store) for o in gc.get_objects())
    with pytest.raises(SandboxTrap) as info:
        wat.run_module(rt, wat.memory_bomb_component(report_oom=True))
    kept = info.value
    gc.collect()
    after = sum(isinstance(o, wasmtime.Store) for o in gc.get_objects())
    assert after <= before
    assert kept.details["usage"]["fuel_consumed"] > 0
