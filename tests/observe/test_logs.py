"""Structured logs: one JSON object per line, the trace id inside a span, repeats limited,
and no input or staged secret in any line the host logs during a call."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.mcp.limits import RateLimitedLog
from host.observe.logs import JsonFormatter
from sdk.commands._observe import observability
from tests.observe.fetch import CANARY, SECRET, api, fetch_host
from tests.support.otel import Otel, otel
from tests.support.servers import LoopbackServer

__all__ = ["api", "otel"]


def _record(message: str, *args: object, level: int = logging.WARNING, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError(f"an input value {CANARY}")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("stockade.mcp", level, __file__, 1, message, args, info)


def test_json_line_has_the_fields_and_keeps_only_an_exceptions_type() -> None:
    line = JsonFormatter().format(_record("tools/call refused: %s", "BUSY", exc=True))
    assert "\n" not in line
    parsed = json.loads(line)
    assert set(parsed) == {"time", "level", "logger", "message", "exception"}
    assert (parsed["level"], parsed["logger"], parsed["message"]) == ("warn", "stockade.mcp", "tools/call refused: BUSY")
    assert parsed["exception"] == "ValueError" and CANARY not in line
    assert parsed["time"].endswith("Z") and parsed["time"][10] == "T"


def test_json_line_inside_a_span_carries_its_trace_and_span_ids(otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("outer") as span:
        parsed = json.loads(JsonFormatter().format(_record("hello")))
    assert parsed["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert parsed["span_id"] == format(span.get_span_context().span_id, "016x")
    assert "trace_id" not in json.loads(JsonFormatter().format(_record("outside")))


def test_repeated_errors_are_one_json_line_per_interval_with_their_count() -> None:
    now = [0.0]
    limiter = RateLimitedLog(interval_s=10, clock=lambda: now[0])
    formatter = JsonFormatter()
    lines = []
    for second in range(25):
        now[0] = float(second)
        record = _record("accept failed: %s", "EMFILE", level=logging.ERROR)
        if limiter.filter(record):
            lines.append(json.loads(formatter.format(record)))
    assert [line["message"] for line in lines] == [
        "accept failed: EMFILE",
        "accept failed: EMFILE (and 9 more like it in the last 10 s)",
        "accept failed: EMFILE (and 9 more like it in the last 10 s)",
    ]
    assert {line["level"] for line in lines} == {"error"}


@pytest.fixture
def root_handlers() -> Iterator[None]:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in before:
            root.removeHandler(handler)
    root.setLevel(level)


def test_serve_log_format_json_writes_json_lines_to_stderr(
    root_handlers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(log_format="json", metrics_port=None, metrics_host="127.0.0.1")
    with observability(args, env={}):
        for _ in range(3):
            logging.getLogger("stockade.mcp").warning("reload refused: %s", "LOCK_ROLLBACK")
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["reload refused: LOCK_ROLLBACK"]  # repeats held


def test_no_log_line_of_a_call_carries_the_input_or_the_staged_secret(
    tmp_path: Path, api: LoopbackServer, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    fx = fetch_host(tmp_path, api)
    with caplog.at_level(logging.DEBUG):
        # A URL outside the allowlist: the egress is refused (and logged, if anything logs it).
        bad = f"http://api.observe.example:{api.port}/v2/other?q={CANARY}"
        fx.host.call(fx.request("echo.fetch", input={"url": bad}))
        fx.host.call(fx.request("echo.fetch", input={"url": bad.replace("/v2/other", "/v1/go")}))
    fx.host.close()
    formatter = JsonFormatter()
    text = "\n".join(formatter.format(record) for record in caplog.records)
    assert caplog.records  # the host did log (the unsafe_allow_loopback warning at least)
    assert SECRET not in text and CANARY not in text
