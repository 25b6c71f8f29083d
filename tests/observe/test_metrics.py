"""Metrics through OpenTelemetry, scraped from the Prometheus endpoint and parsed with
``prometheus_client``'s own parser after a known sequence of calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client.parser import text_string_to_metric_families

from host import observe
from host.observe.prometheus import MetricsEndpoint
from tests.observe.fetch import API, CANARY, SECRET, api, fetch_host, fetch_url
from tests.support.servers import LoopbackServer

__all__ = ["api"]


@pytest.fixture
def endpoint() -> Iterator[MetricsEndpoint]:
    served = MetricsEndpoint("127.0.0.1", 0)
    meters = MeterProvider(metric_readers=[served.reader])
    tracer = TracerProvider()  # no exporter: metrics only
    observe.enable(tracer_provider=tracer, meter_provider=meters)
    try:
        yield served
    finally:
        observe.disable()
        meters.shutdown()
        tracer.shutdown()
        served.close()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_prometheus_endpoint_counts_a_known_sequence_of_calls(
    tmp_path: Path, api: LoopbackServer, endpoint: MetricsEndpoint
) -> None:
    fx = fetch_host(tmp_path, api, rate_limit={"per_minute": 2, "per_hour": 100})
    request = fx.request("echo.fetch", input={"url": fetch_url(api)})
    outcomes = [fx.host.call(request) for _ in range(3)]  # two run, the third is over the rate limit
    unknown = fx.host.call(fx.request("echo.nope", input={"url": "x"}))
    fx.host.close()
    assert [r.ok for r in outcomes] == [True, True, False]
    assert outcomes[2].error is not None and outcomes[2].error.code == "RATE_LIMITED"
    assert unknown.error is not None and unknown.error.code == "TOOL_NOT_FOUND"
    response = httpx2.get(endpoint.url, timeout=10)
    assert response.status_code == 200
    samples = _samples(response.text)

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    assert value("stockade_calls_total", stockade_tool="echo.fetch", stockade_outcome="ok") == 2
    assert value("stockade_calls_total", stockade_tool="echo.fetch", stockade_outcome="RATE_LIMITED") == 1
    # A refused name is not a label: untrusted strings never become series.
    assert value("stockade_calls_total", stockade_tool="_unknown", stockade_outcome="TOOL_NOT_FOUND") == 1
    assert not any("echo.nope" in str(key) for key in samples)
    assert value("stockade_rate_limit_refusals_total") == 1
    assert value("stockade_egress_requests_total", server_address=API, stockade_egress_outcome="ok") == 4
    assert value("stockade_egress_bytes_total", server_address=API, network_io_direction="receive") == 8
    assert value("stockade_call_duration_seconds_count", stockade_tool="echo.fetch", stockade_outcome="ok") == 2
    assert value("stockade_sandbox_fuel_count", stockade_tool="echo.fetch") == 2
    assert value("stockade_sandbox_fuel_sum", stockade_tool="echo.fetch") == sum(r.usage.fuel for r in outcomes[:2])
    assert value("stockade_stage_duration_seconds_count", stockade_stage="stockade.sandbox") == 2
    assert value("stockade_stage_duration_seconds_count", stockade_stage="stockade.rate_limit") == 3
    assert SECRET not in response.text and CANARY not in response.text


def test_metrics_endpoint_serves_only_metrics_and_releases_its_port() -> None:
    served = MetricsEndpoint("127.0.0.1", 0)
    port = served.port
    assert httpx2.get(served.url, timeout=10).status_code == 200
    served.close()
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
