"""``stockade serve`` with observability: a real server process, a real OTLP/HTTP receiver on
loopback standing in for the collector, and its Prometheus endpoint scraped and parsed."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import anyio
import httpx2
import mcp
import pytest
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.mcp.conftest import World
from tests.support.cli import cli_env, run_cli
from tests.support.servers import LoopbackServer, respond


@pytest.fixture
def collector() -> Iterator[LoopbackServer]:
    routes = {"/v1/traces": respond(200), "/v1/metrics": respond(200)}
    with LoopbackServer(routes=routes) as server:
        yield server


def _serve(world: World, collector: LoopbackServer) -> tuple[subprocess.Popen[str], str, str, list[str]]:
    env = cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url(""), OTEL_BSP_SCHEDULE_DELAY="100")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "serve", "--transport", "http", "--port", "0", "--metrics-port", "0",
         "--project", "p", "--subject", "alice", "--lock", str(world.lock), "--state-dir", str(world.state)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        cwd=world.root,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    metrics = ""
    for line in proc.stderr:
        lines.append(line)
        if "metrics on " in line:
            metrics = line.split("metrics on ", 1)[1].strip()
        if "listening on " in line:
            return proc, line.split("listening on ", 1)[1].strip(), metrics, lines
    raise AssertionError("".join(lines))


def _spans(collector: LoopbackServer) -> list[str]:
    names = []
    for received in collector.requests:
        if received.path == "/v1/traces":
            export = ExportTraceServiceRequest.FromString(received.body)
            names += [s.name for r in export.resource_spans for scope in r.scope_spans for s in scope.spans]
    return names


def test_serve_exports_spans_over_otlp_and_counts_calls_on_its_metrics_endpoint(
    world: World, collector: LoopbackServer
) -> None:
    proc, url, metrics_url, _ = _serve(world, collector)
    try:
        assert metrics_url.startswith("http://127.0.0.1:") and metrics_url.endswith("/metrics")

        async def call() -> None:
            async with mcp.Client(streamable_http_client(url), mode="legacy") as client:
                assert (await client.call_tool("echo.say", {"message": "secret-ish input 42"})).is_error is False

        anyio.run(call)
        text = httpx2.get(metrics_url, timeout=10).text
        calls = {
            (s.labels.get("stockade_tool"), s.labels.get("stockade_outcome")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "stockade_calls_total"
        }  # fmt: skip
        assert calls == {("echo.say", "ok"): 1}
        assert "secret-ish input 42" not in text
        deadline = time.monotonic() + 20
        while "stockade.call" not in _spans(collector) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
    names = _spans(collector)
    assert {"stockade.mcp.tools_call", "stockade.call", "stockade.sandbox"} <= set(names)
    assert all(b"secret-ish input 42" not in r.body for r in collector.requests)


def test_serve_refuses_a_public_metrics_address(world: World) -> None:
    done = run_cli(
        "serve", "--metrics-port", "0", "--metrics-host", "0.0.0.0", "--project", "p", "--subject", "alice",
        "--lock", str(world.lock), "--state-dir", str(world.state), cwd=world.root,
    )  # fmt: skip
    assert done.returncode == 2
    assert "METRICS_BIND" in done.stderr and "0.0.0.0" in done.stderr
